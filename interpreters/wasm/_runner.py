"""Running one meet in a fresh WebAssembly instance: the runner a worker (or a thread of
the place) holds.

A `Runner` has its own engine, with the agent API linked in, its own compiled modules and
its own `Ticker`, so that stopping one meet (bumping its engine's epoch) stops no other: a
confined worker process holds one (`_worker`); a place that runs instances in its own
process holds one per thread that runs meets (`lease`).

A meet costs a new store, a new instance of the module (compiled once per runner and kept
by hash, or precompiled by the place for C source) and the call of its `_start`: tens of
microseconds. What one instance may do and use:
- the agent API, tacoma.h's calls, through the host functions `tacoma.call` (a whole
  request, as `tacoma.agent._calls` frames it, read from the agent's memory) and
  `tacoma.reply` (the answer, copied into it). A pointer or length outside its memory
  ends the meet as failed, and nothing outside it is read or written;
- WASI preview 1 with no directory, socket or environment: argv ["agent"], an empty
  stdin, and stdout and stderr written to the meet's output (bounded by the place's
  --file-size: past it a write fails with EFBIG, which the agent sees). Its one call that
  can block, `poll_oneoff` (sleep), is the runner's own, which wakes when the meet's time
  is up or the place stops it;
- memory up to the meet's limit (the store's limits), and its CPU time: a thread bumps the
  engine's epoch when the meet's CPU time or deadline is spent, and the instance stops at
  its next check (`Ticker`).

The host functions never raise into the runtime: wasmtime's Python bindings keep the
exception a host function raised in one global, which a meet on another thread could take
as its own. A call that must end the meet records why and bumps this runner's epoch; the
instance stops at its next check, and the runner reports what it recorded.

How the meet ends: `_start` returns, or the agent exits with status 0: its briefcase
(handle 0) is the result. `tc_fail`: failed with its message. Another exit status, or a
trap (unreachable, a bad memory access, a stack overflow): failed, with the trap and the
module's backtrace. Its CPU time or memory spent: AgentKilled, as in every language.
"""

from __future__ import annotations

import collections
import errno
import hashlib
import math
import os
import re
import struct
import threading
import time

import wasmtime
from tacoma.agent._calls import Calls, Unframer, frame, output_since
from tacoma.agent._channel import AgentChannel, AgentFailure
from tacoma.wire._briefcase import CODE, Briefcase
from tacoma.wire._errors import AgentKilled
from tacoma.wire._program import artifact_key, program_bytes, program_name
from tacoma.wire._protocol import Meet

from . import kind
from ._engine import compile_module, new_engine, unpack_artifact

__all__ = ["Runner", "lease"]

#: Compiled modules a runner keeps, the most recently used.
MODULES = 32
#: The least time, in seconds, between two looks of the ticker at a running meet.
TICK = 0.05
#: Memory a worker keeps for itself (its Python, the runtime) out of the meet's limit,
#: where the process has no RLIMIT_AS to measure it against.
WORKER_SHARE = 96 << 20
#: A meet's time where the place gave none (it always does): the place's own default.
MEET_SECONDS = 300.0
#: A memory this close to its limit when the instance trapped was stopped by the limit (a
#: malloc of a few MiB more fails before the memory is quite full).
NEAR_LIMIT = 4 << 20
#: The largest table an instance may have, in elements, and how many (each limit bounds
#: one table, not their sum: a C agent has one).
TABLE_ELEMENTS = 1 << 20
TABLES = 1
#: A backtrace's line of the agent's C source, as clang's debug information names it.
_SOURCE_LINE = re.compile(r"at (?:\./)?agent\.c:(\d+)(?::\d+)?")
_I32 = wasmtime.ValType.i32()

# WASI preview 1's poll_oneoff: a subscription is 48 bytes (userdata u64, tag u8 at 8, and
# at 16 either a clock's id u32, timeout u64 at 24, precision u64 at 32 and flags u16 at 40,
# or an fd u32); an event is 32 bytes (userdata u64, error u16 at 8, type u8 at 10, and for
# an fd its nbytes u64 at 16 and flags u16 at 24).
_SUBSCRIPTION, _EVENT = 48, 32
_CLOCK, _FD_READ, _FD_WRITE = 0, 1, 2
_ABSTIME = 1
_HANGUP = 1
_ERRNO_SUCCESS, _ERRNO_BADF, _ERRNO_FAULT, _ERRNO_INVAL = 0, 8, 21, 28
#: The clocks a sleep may name: realtime and monotonic. Not the CPU-time clocks (2, 3): the
#: process's counts every meet it runs (an absolute sleep on it would tell an agent how
#: busy the place is), and a sleeping thread's never advances; wasmtime reads both as 0.
_CLOCKS = {0: time.CLOCK_REALTIME, 1: time.CLOCK_MONOTONIC}


class _Running:
    """One meet's instance: its calls (the briefcases by handle), the reply the agent has
    yet to take, and why the runner stopped it, if it did."""

    def __init__(self, meet: Meet, channel: AgentChannel) -> None:
        self.calls = Calls(meet.briefcase, channel)
        self.most = channel.conn.max_frame
        self.reply = b""
        self.fault: str | None = None
        self.ended: BaseException | None = None  # the channel ended under a call


class Ticker:
    """Stops a running instance once its meet's CPU time or deadline is spent.

    A thread of its own (wasmtime runs the instance with the GIL released) looks, while a
    meet runs, at the CPU clock of the thread that runs it and at the time; past either, it
    bumps the engine's epoch, and the instance (its store's deadline one epoch on) traps at
    its next check; a sleeping `poll_oneoff` wakes. It looks only when the meet could have
    spent one or the other (its thread cannot use more CPU time than time passes), so a
    meet that ends sooner costs it no wake-up; with no meet to watch, it sleeps.
    """

    def __init__(self, engine: wasmtime.Engine, wake: threading.Event) -> None:
        self._engine = engine
        self._wake = wake
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._clock = 0
        self._active = False
        self._cpu_from = self._cpu_limit = self._deadline = 0.0
        self._due = math.inf  # when the thread looks next (monotonic)
        #: Why the last meet was stopped ("cpu", "deadline" or "stopped"), or None; and a
        #: stop for the next meet, made before it began.
        self.fired: str | None = None
        self._pending: str | None = None
        self._thread: threading.Thread | None = None
        self._closed = False

    def begin(self) -> None:
        """Start its thread (not in a zygote, which forks: a thread is not forked with it,
        and a lock it held would stay held in the child)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="tacoma-ticker",
                                            daemon=True)
            self._thread.start()

    def start(self, cpu_seconds: float, seconds: float) -> None:
        """A meet begins on this thread: watch its CPU time and its deadline (or stop it at
        once, if it was stopped before it began: see `fire`)."""
        with self._lock:
            self.fired = self._pending
            self._pending = None
            self._clock = time.pthread_getcpuclockid(threading.get_ident())
            self._cpu_from = time.clock_gettime(self._clock)
            self._cpu_limit = cpu_seconds
            now = time.monotonic()
            self._deadline = now + seconds
            self._active = True
            if self.fired is not None:
                self._stop_now()
            first = now + min(seconds, cpu_seconds)
            if first < self._due:
                self._due = first
                self._changed.notify()

    def stop(self) -> None:
        with self._lock:
            self._active = False

    def left(self) -> float:
        """Seconds until the running meet's deadline (0 once it is stopped)."""
        with self._lock:
            if not self._active or self.fired is not None:
                return 0.0
            return max(0.0, self._deadline - time.monotonic())

    def fire(self, why: str) -> None:
        """Stop the running meet now (`why` it was stopped); or, with none running, the
        next one as it begins (the place stopped a meet still being set up), until
        `forget` says the next one is someone else's."""
        with self._lock:
            if not self._active:
                self._pending = why
                return
            if self.fired is None:
                self.fired = why
                self._stop_now()

    def _stop_now(self) -> None:
        """(Under the lock.) The running meet stops at its next check; its sleep wakes."""
        self._engine.increment_epoch()
        self._wake.set()

    def forget(self) -> None:
        """A stop for no meet yet begun is void: the runner serves a new thread now."""
        with self._lock:
            self._pending = None

    def close(self) -> None:
        """End its thread (its runner is dropped)."""
        with self._lock:
            self._closed = True
            self._changed.notify()

    def _loop(self) -> None:
        with self._lock:
            while not self._closed:
                now = time.monotonic()
                if now < self._due:
                    self._changed.wait(None if self._due == math.inf else self._due - now)
                    continue
                self._due = math.inf
                if not self._active or self.fired is not None:
                    continue
                used = time.clock_gettime(self._clock) - self._cpu_from
                if used >= self._cpu_limit:
                    self.fired = "cpu"
                elif now >= self._deadline:
                    self.fired = "deadline"
                else:  # neither can be spent before this
                    self._due = now + max(TICK, min(self._deadline - now,
                                                    self._cpu_limit - used))
                    continue
                self._stop_now()


class Runner:
    """An engine, its linker (the agent API and WASI), compiled modules and a ticker: what
    runs meets one after the other, each in a fresh store and instance.

    output: the file descriptor of the meet's output (a worker's stdout); file_limit: the
    most it may hold, where the runner bounds it itself (None: the process's RLIMIT_FSIZE
    does); memory: the most linear memory an instance may have (None: the meet's memory
    limit less WORKER_SHARE); by_principal: keep compiled modules by principal and program
    (a runner that serves several principals in turn), so that no principal's instance is
    made from a module another principal's meet compiled (which programs a place knows is
    no secret from its clients: programs travel by hash, and builds are cached by it);
    watch: start the ticker's thread now (else `ticker.begin` does, later: a zygote's
    runner); compiled: the modules the runners of one process compiled, which this one
    loads rather than compile them again (and then it compiles its builds' modules
    itself: see `trusts_builds`).
    """

    def __init__(self, output: int = 1, file_limit: int | None = None,
                 memory: int | None = None, by_principal: bool = False,
                 watch: bool = True, compiled: Compiled | None = None) -> None:
        self.output = output
        self.file_limit = file_limit
        self.memory = memory
        self.by_principal = by_principal
        #: Whether it loads its builds' precompiled modules (native code) as they are: a
        #: confined worker does; a runner that shares its modules through `compiled` (the
        #: place's own process) compiles them itself.
        self.trusts_builds = compiled is None
        self.compiled = compiled
        # A runner that loads no build's precompiled module may reserve memories whole.
        self.engine = new_engine(reserve=not self.trusts_builds)
        self.linker = wasmtime.Linker(self.engine)
        self.linker.define_wasi()
        self.linker.allow_shadowing = True
        for module, name, params, function in (
                ("tacoma", "call", 2, self._host_call),
                ("tacoma", "reply", 2, self._host_reply),
                ("wasi_snapshot_preview1", "poll_oneoff", 4, self._poll_oneoff)):
            self.linker.define_func(module, name, wasmtime.FuncType([_I32] * params, [_I32]),
                                    function, access_caller=True)
        self._wake = threading.Event()
        self.ticker = Ticker(self.engine, self._wake)
        if watch:
            self.ticker.begin()
        self._modules: collections.OrderedDict[bytes, wasmtime.Module] = \
            collections.OrderedDict()
        self._running: _Running | None = None

    # -- the host functions: none raises (see the module)
    def _stop(self, running: _Running, why: str) -> int:
        """End the meet at the instance's next check, for `why`."""
        if running.fault is None:
            running.fault = why
        self.engine.increment_epoch()
        return 0

    def _host_call(self, caller: wasmtime.Caller, pointer: int, length: int) -> int:
        """tacoma.call(request, length) -> the reply's length: answer one whole request."""
        running = self._running
        if running is None:
            self.engine.increment_epoch()
            return 0
        if running.fault is not None:
            return 0
        try:
            if length & 0xFFFFFFFF > running.most:
                return self._stop(running, f"the agent's request of {length & 0xFFFFFFFF:,} "
                                  f"bytes is over the largest briefcase of {running.most:,}")
            span = _span(caller, pointer, length, "request")
            if isinstance(span, str):
                return self._stop(running, span)
            memory, start, length = span
            unframer = Unframer(running.most, "the WebAssembly agent")
            unframer.feed(bytes(memory.read(caller, start, start + length)))
            request = unframer.next()
            if request is None or unframer.rest():
                reply = [b"error", b"bad-argument", b"not one whole request"]
            else:
                reply = running.calls.answer(request)
        except AgentFailure as exc:
            return self._stop(running, str(exc))
        except BaseException as exc:  # noqa: BLE001 - its channel ended (SystemExit), or a bug
            running.ended = exc
            return self._stop(running, f"{type(exc).__name__}: {exc}")
        running.reply = frame(reply)
        return len(running.reply)

    def _host_reply(self, caller: wasmtime.Caller, pointer: int, length: int) -> int:
        """tacoma.reply(buffer, length) -> bytes copied: the last call's reply, into memory."""
        running = self._running
        if running is None:
            self.engine.increment_epoch()
            return 0
        if running.fault is not None:
            return 0
        try:
            span = _span(caller, pointer, length, "reply buffer")
            if isinstance(span, str):
                return self._stop(running, span)
            memory, start, length = span
            data = running.reply[:length]
            if data:
                memory.write(caller, data, start)
        except BaseException as exc:  # noqa: BLE001 - a bug: the meet ends, saying so
            return self._stop(running, f"{type(exc).__name__}: {exc}")
        running.reply = b""
        return len(data)

    def _poll_oneoff(self, caller: wasmtime.Caller, subscriptions: int, events: int,
                     count: int, written: int) -> int:
        """WASI's poll_oneoff, which C's sleep and nanosleep call: wait for the earliest
        clock subscription, but never past the meet's deadline or the place's stop (the
        runtime's own would sleep on, where an epoch cannot reach it). Stdin is at its end
        at once and stdout and stderr are writable at once; other descriptors are closed."""
        running = self._running
        if running is None:
            self.engine.increment_epoch()
            return 0
        try:
            return self._poll(caller, running, subscriptions, events, count & 0xFFFFFFFF,
                              written)
        except BaseException as exc:  # noqa: BLE001 - a bug: the meet ends, saying so
            return self._stop(running, f"{type(exc).__name__}: {exc}")

    def _poll(self, caller: wasmtime.Caller, running: _Running, subscriptions: int,
              events: int, count: int, written: int) -> int:
        if count == 0:
            return _ERRNO_INVAL
        if count > 4096:
            return _ERRNO_INVAL
        spans = [_span(caller, subscriptions, count * _SUBSCRIPTION, "subscriptions"),
                 _span(caller, events, count * _EVENT, "events"),
                 _span(caller, written, 4, "event count")]
        checked = [span for span in spans if not isinstance(span, str)]
        if len(checked) < len(spans):
            return self._stop(running, next(s for s in spans if isinstance(s, str)))
        inside, out, total = checked
        memory = inside[0]
        data = bytes(memory.read(caller, inside[1], inside[1] + inside[2]))
        ready: list[bytes] = []
        wait: float | None = None
        clocks: list[tuple[int, float]] = []  # (userdata, when: monotonic)
        for at in range(0, len(data), _SUBSCRIPTION):
            userdata, tag = struct.unpack_from("<QB", data, at)
            if tag == _CLOCK:
                clock_id, timeout, _, flags = struct.unpack_from("<I4xQQH", data, at + 16)
                clock = _CLOCKS.get(clock_id)
                if clock is None:
                    ready.append(struct.pack("<QHBxxxxxQHxxxxxx", userdata, _ERRNO_INVAL,
                                             tag, 0, 0))
                    continue
                seconds = timeout / 1e9
                if flags & _ABSTIME:
                    seconds -= time.clock_gettime(clock)
                seconds = max(0.0, seconds)
                clocks.append((userdata, time.monotonic() + seconds))
                wait = seconds if wait is None else min(wait, seconds)
            elif tag in (_FD_READ, _FD_WRITE):
                (fd,) = struct.unpack_from("<I", data, at + 16)
                good = (fd == 0 and tag == _FD_READ) or (fd in (1, 2) and tag == _FD_WRITE)
                ready.append(struct.pack("<QHBxxxxxQHxxxxxx", userdata,
                                         _ERRNO_SUCCESS if good else _ERRNO_BADF, tag, 0,
                                         _HANGUP if good and fd == 0 else 0))
            else:
                return _ERRNO_INVAL
        if not ready and wait is not None:
            left = self.ticker.left()
            if wait >= left:  # its deadline comes first: it ends then
                self._wake.wait(left)
                if self.ticker.fired is None:
                    self.ticker.fire("deadline")
                return 0
            if self._wake.wait(wait):  # stopped meanwhile: it ends at its next check
                return 0
            now = time.monotonic()
            ready = [struct.pack("<QHBxxxxxQHxxxxxx", userdata, _ERRNO_SUCCESS, _CLOCK, 0, 0)
                     for userdata, when in clocks if when <= now + 1e-3]
        memory.write(caller, b"".join(ready), out[1])
        memory.write(caller, len(ready).to_bytes(4, "little"), total[1])
        return _ERRNO_SUCCESS

    def _write_output(self, data: bytes) -> int:
        """The instance's stdout and stderr: the meet's output.

        Never raises (wasmtime would print the exception to the process's stdout). A write
        the file refuses (EFBIG past --file-size) returns the error, negated, which the
        agent sees as its write's errno; one that fits in part writes that part."""
        view = memoryview(data)
        todo = len(view)
        try:
            if self.file_limit is not None:
                room = self.file_limit - os.fstat(self.output).st_size
                if room <= 0 and todo:
                    return -errno.EFBIG
                view = view[:room]
                todo = len(view)
            while view:
                view = view[os.write(self.output, view):]
        except OSError as exc:
            written = todo - len(view)
            return written if written else -(exc.errno or errno.EIO)
        return todo

    # -- meets
    def module(self, meet: Meet, channel: AgentChannel) -> wasmtime.Module:
        """The meet's module: kept from an earlier meet, precompiled by the place (C
        source), or compiled now (a module or WAT)."""
        if not meet.briefcase.folder(CODE):
            raise AgentFailure(f"{meet.agent} needs its WebAssembly module, WAT or C source "
                               f"in the CODE folder (tacoma meet {meet.agent} --code FILE)")
        program = program_bytes(meet.briefcase)
        digest = hashlib.sha256(program)
        if self.by_principal:
            digest.update(b"\0" + meet.principal.encode("utf-8", "surrogateescape"))
        key = digest.digest()
        module = self._modules.get(key)
        if module is not None:
            self._modules.move_to_end(key)
            return module
        if self.compiled is not None:
            module = self.compiled.load(key, self.engine)
            if module is not None:
                self._keep(key, module)
                return module
        # A runner in the place's process gets every program built, confined, first.
        module = (self._built(program, channel)
                  if kind(program) == "c" or not self.trusts_builds
                  else self._compile(program))
        if self.compiled is not None:
            self.compiled.keep(key, module)
        self._keep(key, module)
        return module

    def _keep(self, key: bytes, module: wasmtime.Module) -> None:
        self._modules[key] = module
        if len(self._modules) > MODULES:
            self._modules.popitem(last=False)

    def _compile(self, program: bytes) -> wasmtime.Module:
        try:
            return compile_module(program, self.engine)
        except ValueError as exc:
            raise AgentFailure(f"the CODE folder is not a WebAssembly module the runtime "
                               f"takes: {exc}") from None

    def _built(self, program: bytes, channel: AgentChannel) -> wasmtime.Module:
        """A C program's module, from the place's cache of builds: precompiled (a confined
        worker), or compiled here from the module clang made (a runner that does not trust
        its builds' native code: see _engine.ARTIFACT_MAGIC)."""
        artifacts = channel.plan.artifacts if channel.plan is not None else None
        if artifacts is None:
            raise AgentFailure("this WebAssembly runner was started without the place's "
                               "compiled programs")
        path = os.path.join(artifacts.directory, artifact_key(artifacts.build_id, program))
        try:
            with open(path, "rb") as f:
                module, precompiled = unpack_artifact(f.read())
            if self.trusts_builds:
                return wasmtime.Module.deserialize(self.engine, precompiled)
        except (OSError, ValueError, wasmtime.WasmtimeError) as exc:
            raise AgentFailure(f"the compiled program is not in the place's cache: {exc}") \
                from None
        return self._compile(module)

    def _memory_limit(self, channel: AgentChannel) -> int:
        """The most linear memory an instance may have: the runner's bound, or the meet's
        memory limit less the worker's own share; -1: no limit."""
        if self.memory is not None:
            return self.memory
        limit = channel.plan.limits.memory_bytes if channel.plan is not None else 0
        return max(16 << 20, limit - WORKER_SHARE) if limit else -1

    def run(self, meet: Meet, channel: AgentChannel) -> Briefcase:
        """Run `meet` in a fresh instance: its result briefcase, or AgentFailure."""
        module = self.module(meet, channel)
        store = wasmtime.Store(self.engine)
        memory_limit = self._memory_limit(channel)
        store.set_limits(memory_size=memory_limit, table_elements=TABLE_ELEMENTS,
                         instances=1, tables=TABLES, memories=1)
        store.set_epoch_deadline(1)
        wasi = wasmtime.WasiConfig()
        wasi.argv = ["agent"]
        wasi.stdout_custom = self._write_output
        wasi.stderr_custom = self._write_output
        store.set_wasi(wasi)
        try:
            output_start = os.fstat(self.output).st_size
        except OSError:
            output_start = 0
        running = self._running = _Running(meet, channel)
        limits = channel.plan.limits if channel.plan is not None else None
        ticker = self.ticker
        self._wake.clear()
        code = 0
        instance: wasmtime.Instance | None = None
        try:
            try:
                instance = self.linker.instantiate(store, module)
            except wasmtime.WasmtimeError as exc:
                raise AgentFailure(_instantiate_error(exc, module)) from None
            start = instance.exports(store).get("_start")
            if not isinstance(start, wasmtime.Func):
                raise AgentFailure("the module exports no _start function: an agent is a "
                                   "WASI command (clang --target=wasm32-wasi makes one from "
                                   "main)")
            ticker.start(limits.cpu_seconds if limits is not None else MEET_SECONDS,
                         meet.timeout or MEET_SECONDS)
            try:
                start(store)
            finally:
                ticker.stop()
        except wasmtime.ExitTrap as exc:
            code = exc.code
        except (wasmtime.Trap, wasmtime.WasmtimeError) as exc:  # a trap, or the runner's stop
            _stopped(exc, running, ticker, _memory_size(store, instance), memory_limit,
                     limits, output_start, program_name(meet.briefcase), self.output)
        finally:
            self._running = None
        if running.ended is not None:  # the place closed its channel under a call
            raise running.ended
        if running.fault is not None:
            raise AgentFailure(f"WebAssembly agent stopped: {running.fault}",
                               output_since(output_start, self.output))
        if running.calls.failure is not None:
            raise AgentFailure(running.calls.failure)
        if code != 0:
            raise AgentFailure(f"WebAssembly agent exited with status {code}",
                               output_since(output_start, self.output))
        return running.calls.briefcases[0]

    def stop(self) -> None:
        """Stop the meet running now, from another thread (the place ends it)."""
        self.ticker.fire("stopped")


def _span(caller: wasmtime.Caller, pointer: int, length: int,
          what: str) -> tuple[wasmtime.Memory, int, int] | str:
    """The agent's memory and the span it named, checked to lie inside it (i32s as the
    unsigned addresses they are); else why not."""
    memory = caller.get("memory")
    if not isinstance(memory, wasmtime.Memory):
        return "the module exports no memory named \"memory\" for its calls"
    start, length = pointer & 0xFFFFFFFF, length & 0xFFFFFFFF
    size = memory.data_len(caller)
    if start + length > size:
        return (f"the agent's {what} ({length:,} bytes at {start:#x}) lies outside its "
                f"memory of {size:,} bytes")
    return memory, start, length


def _memory_size(store: wasmtime.Store, instance: wasmtime.Instance | None) -> int:
    """The size of the instance's memory, if it has one (0 if it was never made)."""
    if instance is None:
        return 0
    memory = instance.exports(store).get("memory")
    return memory.data_len(store) if isinstance(memory, wasmtime.Memory) else 0


def _stopped(exc: Exception, running: _Running, ticker: Ticker, memory: int,
             memory_limit: int, limits: object, output_start: int, name: str,
             output: int) -> None:
    """Raise why the instance stopped: the runner's stop, its limits, or its own trap
    (with its backtrace, whose C lines name the agent's file as the user calls it:
    `name`). Only this meet's own state decides (see the module): `exc` gives the trap's
    text."""
    said = output_since(output_start, output)
    if running.ended is not None:
        raise running.ended
    if running.fault is not None:
        raise AgentFailure(f"WebAssembly agent stopped: {running.fault}", said)
    if running.calls.failure is not None:
        raise AgentFailure(running.calls.failure)
    if ticker.fired is not None:
        cpu = getattr(limits, "cpu_seconds", 0)
        if ticker.fired == "cpu":
            raise AgentFailure(f"agent killed: its CPU time limit of {cpu} s was reached",
                               said, kind=AgentKilled.kind)
        if ticker.fired == "stopped":
            raise AgentFailure("agent stopped by its place", said, kind=AgentKilled.kind)
        raise AgentFailure("agent stopped: the meet's time ran out", said,
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
    lines = [line.strip() for line in said.splitlines() if line.strip() and line != "..."]
    raise AgentFailure(f"WebAssembly agent trapped ({first})" + (f": {lines[-1]}" if lines else ""),
                       (f"{said}\n" if said else "") + message)


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


class Compiled:
    """Modules the runners of one process compiled, serialized (by principal and program,
    as their own caches key them), so that each program is compiled once, not once per
    runner: at most MOST bytes, the least recently used forgotten first. Only modules this
    process compiled are kept: what it loads from here is native code it made itself."""

    MOST = 64 << 20

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: collections.OrderedDict[bytes, bytes] = collections.OrderedDict()
        self._bytes = 0

    def load(self, key: bytes, engine: wasmtime.Engine) -> wasmtime.Module | None:
        with self._lock:
            data = self._kept.get(key)
            if data is not None:
                self._kept.move_to_end(key)
        return wasmtime.Module.deserialize(engine, data) if data is not None else None

    def keep(self, key: bytes, module: wasmtime.Module) -> None:
        data = bytes(module.serialize())
        with self._lock:
            if key in self._kept or len(data) > self.MOST:
                return
            self._kept[key] = data
            self._bytes += len(data)
            while self._bytes > self.MOST:
                _, dropped = self._kept.popitem(last=False)
                self._bytes -= len(dropped)


class Lease:
    """A runner lent to one thread of the place (`lease`), until it gives it back."""

    def __init__(self, runner: Runner) -> None:
        self._runner: Runner | None = runner
        self._held = runner
        self._lock = threading.Lock()

    def run(self, meet: Meet, channel: AgentChannel) -> Briefcase:
        """Run a meet: its output starts anew, as a worker's does with each meet."""
        output = self._held.output
        os.ftruncate(output, 0)
        os.lseek(output, 0, os.SEEK_SET)
        return self._held.run(meet, channel)

    def stop(self) -> None:
        """Stop the meet it runs now, if it still holds the runner (from any thread)."""
        with self._lock:
            if self._runner is not None:
                self._runner.stop()

    def close(self) -> None:
        """Give the runner back, for another thread's meets."""
        with self._lock:
            runner, self._runner = self._runner, None
        if runner is not None:
            with _free_lock:
                kept = len(_free) < FREE
                if kept:
                    _free.append(runner)
            if not kept:  # dropped: its ticker's thread ends, and its engine goes with it
                runner.ticker.close()


#: Runners given back by threads of the place, kept for the next (each holds an engine, its
#: compiled modules and a ticker's thread): at most FREE.
FREE = 16
_free: list[Runner] = []
_free_lock = threading.Lock()
_shared = Compiled()


def lease(output: int, file_limit: int, memory: int) -> Lease:
    """A runner for one thread of a place that runs instances in its own process: its meets
    write to `output`, at most `file_limit` bytes, with instances of at most `memory`
    bytes each; it keeps modules by principal (it serves whoever the place sends)."""
    with _free_lock:
        runner = _free.pop() if _free else None
    if runner is None:
        runner = Runner(by_principal=True, compiled=_shared)
    runner.output, runner.file_limit, runner.memory = output, file_limit, memory
    runner.ticker.forget()
    return Lease(runner)
