"""The ag_wasm worker: each meet in a fresh WebAssembly instance, inside a confined process.

Run by the place as this language's zygote (tacoma/agent/_zygote.py), which has loaded the
runtime and made its engine once; each forked worker is confined like every worker before
a meet reaches it. A meet then costs a new store, a new instance of the module (compiled
once per worker and kept by hash, or precompiled by the place for C source) and the call
of its `_start`: tens of microseconds, where a new process costs milliseconds. The place
keeps such a worker warm for later meets of the same principal, whatever their program
(`Interpreter.instances`): the store and the instance are the boundary between one meet
and the next, the process and the kernel's layers the one between principals.

What one instance may do and use:
- the agent API, tacoma.h's calls, through the host functions `tacoma.call` (a whole
  request, as `tacoma.agent._calls` frames it, read from the agent's memory) and
  `tacoma.reply` (the answer, copied into it). A pointer or length outside its memory
  ends the meet as failed, and nothing outside it is read or written;
- WASI preview 1 with no directory, socket or environment: argv ["agent"], an empty
  stdin, and stdout and stderr written to the meet's output file (bounded by the place's
  --file-size: past it a write fails with EFBIG, which the agent sees);
- memory up to the meet's limit (less what the worker itself holds: the store's limits;
  the process's cgroup and RLIMIT_AS hold the rest), and its CPU time: a thread of the
  worker bumps the engine's epoch when the meet's CPU time or deadline is spent, and the
  instance stops at its next check (`Ticker`).

How the meet ends: `_start` returns, or the agent exits with status 0: its briefcase
(handle 0) is the result. `tc_fail`: failed with its message. Another exit status, or a
trap (unreachable, a bad memory access, a stack overflow): failed, with the trap and the
module's backtrace. Its CPU time or memory spent: AgentKilled, as in every language.
"""

from __future__ import annotations

import collections
import errno
import hashlib
import os
import re
import resource
import threading
import time

import wasmtime
from tacoma.agent import _zygote as zygote
from tacoma.agent._api import check_bound
from tacoma.agent._calls import Calls, Unframer, frame, output_since
from tacoma.agent._channel import AgentChannel, AgentFailure
from tacoma.wire._briefcase import CODE, Briefcase
from tacoma.wire._errors import AgentKilled
from tacoma.wire._program import artifact_key, program_bytes, program_name
from tacoma.wire._protocol import Meet

from ..c import INCLUDE
from . import MINIMAL, interpreter, kind
from ._engine import compile_module, new_engine

#: Compiled modules a worker keeps, the most recently used (a worker serves one principal).
MODULES = 32
#: How often the ticker looks at a running meet's CPU time and deadline, in seconds; and
#: after how long without a meet it sleeps until the next (no wake-ups while idle).
TICK = 0.05
IDLE = 1.0
#: Memory the worker keeps for itself (its Python, the runtime) out of the meet's limit,
#: where the process has no RLIMIT_AS to measure it against; else what it maps already,
#: and MARGIN more for its own allocations, and GROWTH: what a memory reserves to grow
#: into (_engine's memory_reservation_for_growth).
WORKER_SHARE = 96 << 20
MARGIN = 24 << 20
GROWTH = 16 << 20
#: A meet's time where the place gave none (it always does): the place's own default.
MEET_SECONDS = 300.0
#: A memory this close to its limit when the instance trapped was stopped by the limit (a
#: malloc of a few MiB more fails before the memory is quite full).
NEAR_LIMIT = 4 << 20
#: The largest table an instance may have, in elements.
TABLE_ELEMENTS = 1 << 20
#: A backtrace's line of the agent's C source, as clang's debug information names it.
_SOURCE_LINE = re.compile(r"at (?:\./)?agent\.c:(\d+)(?::\d+)?")
_DECLARATION = re.compile(r"^TC__API\b[^(;]*?\b(tc_[a-z]\w*)\(", re.MULTILINE)

with open(os.path.join(INCLUDE, "tacoma.h"), encoding="utf-8") as _header:
    check_bound(interpreter.language, interpreter.spellings,
                frozenset(_DECLARATION.findall(_header.read())), interpreter.extras)


class _Fault(Exception):
    """A host call the agent got wrong in a way that ends its meet (a pointer outside its
    memory): raised inside the host function, it stops the instance."""


class _Running:
    """One meet's instance: its calls (the briefcases by handle), the reply the agent has
    yet to take, and why its host calls stopped it, if they did."""

    def __init__(self, meet: Meet, channel: AgentChannel) -> None:
        self.calls = Calls(meet.briefcase, channel)
        self.most = channel.conn.max_frame
        self.reply = b""
        self.fault: str | None = None


_running: _Running | None = None


def _memory(caller: wasmtime.Caller) -> wasmtime.Memory:
    memory = caller.get("memory")
    if not isinstance(memory, wasmtime.Memory):
        raise _Fault("the module exports no memory named \"memory\" for its calls")
    return memory


def _span(caller: wasmtime.Caller, pointer: int, length: int,
          what: str) -> tuple[wasmtime.Memory, int, int]:
    """The agent's memory and the span it named, checked to lie inside it (i32s as the
    unsigned addresses they are)."""
    memory = _memory(caller)
    start, length = pointer & 0xFFFFFFFF, length & 0xFFFFFFFF
    size = memory.data_len(caller)
    if start + length > size:
        raise _Fault(f"the agent's {what} ({length:,} bytes at {start:#x}) lies outside "
                     f"its memory of {size:,} bytes")
    return memory, start, length


def _host_call(caller: wasmtime.Caller, pointer: int, length: int) -> int:
    """tacoma.call(request, length) -> the reply's length: answer one whole request."""
    running = _running
    if running is None:
        raise _Fault("a call outside a meet")
    try:
        if length & 0xFFFFFFFF > running.most:
            raise _Fault(f"the agent's request of {length & 0xFFFFFFFF:,} bytes is over the "
                         f"largest briefcase of {running.most:,}")
        memory, start, length = _span(caller, pointer, length, "request")
        unframer = Unframer(running.most, "the WebAssembly agent")
        unframer.feed(bytes(memory.read(caller, start, start + length)))
        request = unframer.next()
        if request is None or unframer.rest():
            reply = [b"error", b"bad-argument", b"not one whole request"]
        else:
            reply = running.calls.answer(request)
    except (_Fault, AgentFailure) as exc:
        running.fault = str(exc)
        raise
    running.reply = frame(reply)
    return len(running.reply)


def _host_reply(caller: wasmtime.Caller, pointer: int, length: int) -> int:
    """tacoma.reply(buffer, length) -> bytes copied: the last call's reply, into memory."""
    running = _running
    if running is None:
        raise _Fault("a call outside a meet")
    try:
        memory, start, length = _span(caller, pointer, length, "reply buffer")
    except _Fault as exc:
        running.fault = str(exc)
        raise
    data = running.reply[:length]
    if data:
        memory.write(caller, data, start)
    running.reply = b""
    return len(data)


def _output(data: bytes) -> int:
    """The instance's stdout and stderr: the worker's own stdout, the meet's output file.

    Never raises: wasmtime would print the exception to the worker's stdout. A write the
    file refuses (EFBIG past --file-size) returns the error, negated, which the agent
    sees as its write's errno."""
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(1, view):]
    except OSError as exc:
        written = len(data) - len(view)
        return written if written else -(exc.errno or errno.EIO)
    return len(data)


ENGINE = new_engine()
LINKER = wasmtime.Linker(ENGINE)
LINKER.define_wasi()
_I32 = wasmtime.ValType.i32()
for _name, _function in (("call", _host_call), ("reply", _host_reply)):
    LINKER.define_func("tacoma", _name, wasmtime.FuncType([_I32, _I32], [_I32]), _function,
                       access_caller=True)


class Ticker:
    """Stops a running instance once its meet's CPU time or deadline is spent.

    A thread of its own (wasmtime runs the instance with the GIL released) looks every
    TICK seconds, while a meet runs, at the main thread's CPU clock and the time; past
    either, it bumps the engine's epoch, and the instance (its store's deadline one epoch
    on) traps at its next check. Idle for IDLE seconds, it sleeps until the next meet.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._awake = threading.Event()
        self._clock = time.pthread_getcpuclockid(threading.main_thread().ident or 0)
        self._active = False
        self._cpu_from = self._cpu_limit = self._deadline = 0.0
        self._last = time.monotonic()
        #: Why the last meet was stopped ("cpu" or "deadline"), or None.
        self.fired: str | None = None
        threading.Thread(target=self._loop, name="tacoma-ticker", daemon=True).start()

    def start(self, cpu_seconds: float, seconds: float) -> None:
        with self._lock:
            self.fired = None
            self._cpu_from = time.clock_gettime(self._clock)
            self._cpu_limit = cpu_seconds
            self._deadline = time.monotonic() + seconds
            self._active = True
        if not self._awake.is_set():
            self._awake.set()

    def stop(self) -> None:
        with self._lock:
            self._active = False
            self._last = time.monotonic()

    def _loop(self) -> None:
        while True:
            self._awake.wait()
            time.sleep(TICK)
            with self._lock:
                now = time.monotonic()
                if not self._active:
                    if now - self._last > IDLE:
                        self._awake.clear()
                    continue
                if self.fired is not None:
                    continue
                if time.clock_gettime(self._clock) - self._cpu_from >= self._cpu_limit:
                    self.fired = "cpu"
                elif now >= self._deadline:
                    self.fired = "deadline"
                else:
                    continue
                ENGINE.increment_epoch()


_ticker: Ticker | None = None
_room: int | None = None  # the memory an instance may have (see _memory_limit)
_modules: collections.OrderedDict[bytes, wasmtime.Module] = collections.OrderedDict()


def _prepare() -> None:
    """In each worker, confined: the ticker's thread (before the worker's baseline, which
    counts its threads), and the memory its instances may have."""
    global _ticker, _room
    _ticker = Ticker()
    _room = _free_address_space()


def _module(meet: Meet, channel: AgentChannel) -> wasmtime.Module:
    """The meet's module: kept from an earlier meet, precompiled by the place (C source), or
    compiled now (a module or WAT)."""
    if not meet.briefcase.folder(CODE):
        raise AgentFailure(f"{meet.agent} needs its WebAssembly module, WAT or C source in "
                           f"the CODE folder (tacoma meet {meet.agent} --code FILE)")
    program = program_bytes(meet.briefcase)
    key = hashlib.sha256(program).digest()
    module = _modules.get(key)
    if module is not None:
        _modules.move_to_end(key)
        return module
    if kind(program) == "c":
        artifacts = channel.plan.artifacts if channel.plan is not None else None
        if artifacts is None:
            raise AgentFailure("this WebAssembly worker was started without the place's "
                               "compiled programs")
        path = os.path.join(artifacts.directory, artifact_key(artifacts.build_id, program))
        try:
            module = wasmtime.Module.deserialize_file(ENGINE, path)
        except (OSError, wasmtime.WasmtimeError) as exc:
            raise AgentFailure(f"the compiled program is not in the place's cache: {exc}") \
                from None
    else:
        try:
            module = compile_module(program, ENGINE)
        except ValueError as exc:
            raise AgentFailure(f"the CODE folder is not a WebAssembly module the runtime "
                               f"takes: {exc}") from None
    _modules[key] = module
    if len(_modules) > MODULES:
        _modules.popitem(last=False)
    return module


def _memory_limit(channel: AgentChannel) -> int:
    """The most linear memory an instance may have (`_free_address_space`); where the
    process has no RLIMIT_AS, the meet's memory limit less the worker's own share; -1:
    no limit."""
    if _room is not None:
        return _room
    limit = channel.plan.limits.memory_bytes if channel.plan is not None else 0
    return max(16 << 20, limit - WORKER_SHARE) if limit else -1


def _free_address_space() -> int | None:
    """The most memory an instance may grow to under the process's RLIMIT_AS: what the
    worker leaves free, less a margin for its own allocations, halved (a memory grows by
    moving: for a moment its old and new copies, each with its growth room, are both
    mapped); None if the process has no RLIMIT_AS."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    with open("/proc/self/status", encoding="ascii") as status:
        mapped = next((int(line.split()[1]) * 1024 for line in status
                       if line.startswith("VmSize:")), 0)
    return max(16 << 20, (soft - mapped - MARGIN) // 2 - GROWTH)


def run(meet: Meet, channel: AgentChannel) -> Briefcase:
    global _running
    module = _module(meet, channel)
    store = wasmtime.Store(ENGINE)
    memory_limit = _memory_limit(channel)
    store.set_limits(memory_size=memory_limit, table_elements=TABLE_ELEMENTS)
    store.set_epoch_deadline(1)
    wasi = wasmtime.WasiConfig()
    wasi.argv = ["agent"]
    wasi.stdout_custom = _output
    wasi.stderr_custom = _output
    store.set_wasi(wasi)
    try:
        output_start = os.fstat(1).st_size
    except OSError:
        output_start = 0
    running = _running = _Running(meet, channel)
    limits = channel.plan.limits if channel.plan is not None else None
    ticker = _ticker
    code = 0
    instance: wasmtime.Instance | None = None
    try:
        try:
            instance = LINKER.instantiate(store, module)
        except wasmtime.WasmtimeError as exc:
            raise AgentFailure(_instantiate_error(exc, module)) from None
        start = instance.exports(store).get("_start")
        if not isinstance(start, wasmtime.Func):
            raise AgentFailure("the module exports no _start function: an agent is a WASI "
                               "command (clang --target=wasm32-wasi makes one from main)")
        if ticker is not None and limits is not None:
            ticker.start(limits.cpu_seconds, meet.timeout or MEET_SECONDS)
        try:
            start(store)
        finally:
            if ticker is not None:
                ticker.stop()
    except wasmtime.ExitTrap as exc:
        code = exc.code
    except (wasmtime.Trap, wasmtime.WasmtimeError, _Fault) as exc:  # a trap, or a host call's
        _stopped(exc, running, ticker, _memory_size(store, instance), memory_limit, limits,
                 output_start, program_name(meet.briefcase))
    finally:
        _running = None
    if running.calls.failure is not None:
        raise AgentFailure(running.calls.failure)
    if code != 0:
        raise AgentFailure(f"WebAssembly agent exited with status {code}",
                           output_since(output_start))
    return running.calls.briefcases[0]


def _memory_size(store: wasmtime.Store, instance: wasmtime.Instance | None) -> int:
    """The size of the instance's memory, if it has one (0 if it was never made)."""
    if instance is None:
        return 0
    memory = instance.exports(store).get("memory")
    return memory.data_len(store) if isinstance(memory, wasmtime.Memory) else 0


def _stopped(exc: Exception, running: _Running, ticker: Ticker | None, memory: int,
             memory_limit: int, limits: object, output_start: int, name: str) -> None:
    """Raise why the instance stopped: its fault, its limits, or its own trap (with its
    backtrace, whose C lines name the agent's file as the user calls it: `name`)."""
    output = output_since(output_start)
    if running.fault is not None:
        raise AgentFailure(f"WebAssembly agent stopped: {running.fault}", output)
    if running.calls.failure is not None:
        raise AgentFailure(running.calls.failure)
    if ticker is not None and ticker.fired is not None:
        cpu = getattr(limits, "cpu_seconds", 0)
        if ticker.fired == "cpu":
            raise AgentFailure(f"agent killed: its CPU time limit of {cpu} s was reached",
                               output, kind=AgentKilled.kind)
        raise AgentFailure("agent stopped: the meet's time ran out", output,
                           kind=AgentKilled.kind)
    message = str(exc).strip()
    first = _cause(message) or type(exc).__name__
    if not name.startswith("<"):
        message = _SOURCE_LINE.sub(lambda m: f"at {name}:{m.group(1)}", message)
    if memory_limit > 0 and memory + NEAR_LIMIT > memory_limit:
        raise AgentFailure(f"agent killed by its memory limit: its WebAssembly memory "
                           f"reached {memory / 2**20:.0f} MiB of the "
                           f"{memory_limit / 2**20:.0f} MiB it may have ({first})",
                           message, kind=AgentKilled.kind)
    # As a C agent's crash: with the last line it wrote (an assert's, say).
    said = [line.strip() for line in output.splitlines() if line.strip() and line != "..."]
    raise AgentFailure(f"WebAssembly agent trapped ({first})" + (f": {said[-1]}" if said else ""),
                       (f"{output}\n" if output else "") + message)


def _cause(message: str) -> str:
    """What stopped it, from wasmtime's message ("wasm trap: call stack exhausted"), which
    puts the backtrace first and the cause after "Caused by:"."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    if "Caused by:" in lines:
        causes = lines[lines.index("Caused by:") + 1:]
        return causes[-1].lstrip("0123456789: ") if causes else ""
    return lines[0] if lines else ""


def _instantiate_error(exc: wasmtime.WasmtimeError, module: wasmtime.Module) -> str:
    given = {"tacoma", "wasi_snapshot_preview1"}
    unknown = sorted({f"{i.module}.{i.name}" for i in module.imports if i.module not in given})
    if unknown:
        return (f"the module imports {', '.join(unknown)}, which no place gives: an agent "
                "may import only tacoma.call, tacoma.reply and WASI preview 1")
    text = str(exc).strip()
    return f"the module cannot be instantiated: {text.splitlines()[0] if text else exc}"


#: Run once before the worker is ready, so the first real meet finds warm code paths.
WARM_UP = Meet(0, "ag_wasm", Briefcase(CODE=[MINIMAL.encode()]))

if __name__ == "__main__":
    zygote.main(run, WARM_UP, prepare=_prepare, instances=interpreter.instances)
