"""The ag_c worker: runs one compiled C agent as its child and serves its agent API calls.

Run by the place as this language's zygote (tacoma/agent/_zygote.py). A forked worker is confined
before the meet arrives, like every worker; on the meet it finds the program the place
compiled (the cache key is the same hash of the CODE folder the place used), starts it with
posix_spawn, and answers its calls until it exits. The binary inherits the worker's
confinement (uid, cgroup, limits, working directory, no_new_privs) and its stdout and
stderr (the meet's output file).

The worker keeps the briefcases; the C side holds handles (0 is the agent's own). Each call
is a request of byte strings on the socket, answered by `tacoma.agent._calls.Calls` (the
table of calls is there; WebAssembly agents send the same ones). The functions tacoma.h
declares are checked, when the zygote starts, against the agent API's table
(tacoma/agent/_api.py) as __init__.py spells it.

How the meet ends: exit status 0 returns handle 0; `fail` fails the meet with its message;
another status fails it saying so; death by a crash signal fails it with the signal, the
last line the agent wrote and the backtrace tacoma.h printed; death at a limit (CPU time,
SIGKILL) is reported as AgentKilled.
"""

from __future__ import annotations

import os
import re
import select
import shutil
import signal
import socket
import subprocess

from tacoma.agent import _zygote as zygote
from tacoma.agent._api import check_bound
from tacoma.agent._calls import Calls, Unframer, frame, output_since
from tacoma.agent._channel import AgentChannel, AgentFailure
from tacoma.agent._sandbox import describe_exit
from tacoma.wire._briefcase import CODE, Briefcase
from tacoma.wire._errors import AgentKilled
from tacoma.wire._program import artifact_key, program_bytes, program_name
from tacoma.wire._protocol import Meet

from . import INCLUDE, interpreter

#: What tacoma.h writes before a crash's backtrace.
CRASH_MARKER = "--- tacoma: the C agent crashed; backtrace:"
#: The file the place compiles the program as, which debug information names.
SOURCE = interpreter.build.source_name if interpreter.build is not None else "agent.c"
#: Signals that mean the agent crashed (its own fault), not that it was stopped at a limit.
CRASHES = {signal.SIGSEGV: "segmentation fault", signal.SIGABRT: "abort",
           signal.SIGBUS: "bus error", signal.SIGFPE: "arithmetic error",
           signal.SIGILL: "illegal instruction"}
#: A function tacoma.h declares for agents (its own helpers are named tc__...).
_DECLARATION = re.compile(r"^TC__API\b[^(;]*?\b(tc_[a-z]\w*)\(", re.MULTILINE)


def declared(header: str) -> frozenset[str]:
    """The functions a tacoma.h declares for agents."""
    return frozenset(_DECLARATION.findall(header))


with open(os.path.join(INCLUDE, "tacoma.h"), encoding="utf-8") as _header:
    check_bound(interpreter.language, interpreter.spellings, declared(_header.read()),
                interpreter.extras)


class _Agent(Calls):
    """One running C agent: its briefcases and calls (`Calls`), and its end of the socket."""

    def __init__(self, meet: Meet, channel: AgentChannel, sock: socket.socket) -> None:
        super().__init__(meet.briefcase, channel)
        self.sock = sock
        self._unframer = Unframer(channel.conn.max_frame, "the C agent")

    def receive(self) -> list[bytes] | None:
        """The next complete request, or None if more bytes are needed; EOFError at the end."""
        data = self.sock.recv(1 << 18)
        if not data:
            raise EOFError
        self._unframer.feed(data)
        return self._unframer.next()

    def pending(self) -> list[bytes] | None:
        """A request already buffered, if a whole one is."""
        return self._unframer.next()

    def reply(self, request: list[bytes]) -> None:
        self.sock.sendall(frame(self.answer(request)))


def _program(meet: Meet, channel: AgentChannel) -> str:
    if not meet.briefcase.folder(CODE):
        raise AgentFailure(f"{meet.agent} needs its C program in the CODE folder "
                           f"(tacoma meet {meet.agent} --code FILE)")
    artifacts = channel.plan.artifacts if channel.plan is not None else None
    if artifacts is None:  # the place gives every C worker its cache (`_builds`)
        raise AgentFailure("this C worker was started without the place's compiled programs")
    key = artifact_key(artifacts.build_id, program_bytes(meet.briefcase))
    path = os.path.join(artifacts.directory, key)
    if not os.path.isfile(path):
        raise AgentFailure(f"the compiled program {key[:16]} is not in the place's cache")
    return path


_FRAME = re.compile(r"^agent\(\+0x([0-9a-f]+)\)\[0x[0-9a-f]+\]$")
#: A library's frame with a symbol: `/lib/.../libc.so.6(abort+0xd3)[0x...]`.
_LIBRARY_FRAME = re.compile(r"^(/[^(]+)\(([A-Za-z_][\w.]*)\+0x[0-9a-f]+\)\[0x[0-9a-f]+\]$")


def _symbolize(output: str, program: str, name: str) -> str:
    """The crash backtrace with the agent's own frames as `function at agent.c:LINE`.

    tacoma.h's handler writes raw frames (`agent(+0x12d9)[0x...]`): glibc names only
    exported functions, and then without lines. addr2line reads the program's debug
    information (it is compiled with -g) instead. Frames inside tacoma.h's handler are
    left out; libc's frames stay as they are. Without addr2line the raw frames are kept.
    """
    head, marker, frames = output.rpartition(CRASH_MARKER)
    lines = [line.strip() for line in frames.splitlines() if line.strip()]
    addr2line = shutil.which("addr2line")
    if not marker or addr2line is None:
        return output
    # Frame 0 is the handler, 1 the kernel's signal return, 2 the instruction that was
    # interrupted; the rest are return addresses, which point after their call: the
    # call's own line is one byte before.
    wanted = [(i, int(m.group(1), 16) - (i != 2)) for i, line in enumerate(lines)
              if (m := _FRAME.match(line))]
    if not wanted:
        return output
    args = [addr2line, "-a", "-f", "-i", "-C", "-e", program, *(hex(a) for _, a in wanted)]
    try:
        found = subprocess.run(args, capture_output=True, text=True, timeout=10,  # noqa: S603 - a fixed tool on our own binary
                               check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return output
    names: list[list[str]] = []
    pending = ""
    for line in found.splitlines():
        if line.startswith("0x"):
            names.append([])
        elif not pending:
            pending = line
        elif names:
            where = os.path.basename(line.split(" (discriminator")[0])
            if where.startswith(f"{SOURCE}:") and name != "<agent>":  # as the user calls it
                where = name + where[len(SOURCE):]
            if not pending.startswith("tc__"):  # tacoma.h's own frames
                names[-1].append(f"  {pending}" + (f" at {where}" if "?" not in where else ""))
            pending = ""
    if len(names) != len(wanted):
        return output
    resolved = dict(zip((i for i, _ in wanted), names, strict=True))
    out = []
    for i, line in enumerate(lines):
        if i in resolved:
            out.extend(resolved[i])
        elif (lib := _LIBRARY_FRAME.match(line)) is not None:
            out.append(f"  {lib.group(2)} in {os.path.basename(lib.group(1))}")
    return head + marker + "\n" + "\n".join(out)


def _crash_message(name: str, why: str, output: str) -> str:
    """'C agent crashed (SIGABRT, abort): <the last line it wrote before the crash>'."""
    before = output.rsplit(CRASH_MARKER, 1)[0] if CRASH_MARKER in output else output
    lines = [line.strip() for line in before.splitlines() if line.strip() and line != "..."]
    message = f"C agent crashed ({name}, {why})"
    return f"{message}: {lines[-1]}" if lines else message


def run(meet: Meet, channel: AgentChannel) -> Briefcase:
    path = _program(meet, channel)
    ours, theirs = socket.socketpair()
    os.set_inheritable(theirs.fileno(), True)
    env = {**os.environ, "TACOMA_FD": str(theirs.fileno()), "TACOMA_PLACE": channel.place}
    try:
        output_start = os.fstat(1).st_size
    except OSError:
        output_start = 0
    try:
        # SIGPIPE back to its default (Python ignores it); SIGXFSZ stays ignored, so that
        # writing past the file-size limit is an error the agent sees, as in every language.
        pid = os.posix_spawn(path, ["agent"], env, setsigdef=(signal.SIGPIPE,))
    except OSError as exc:
        raise AgentFailure(f"cannot start the C agent: {exc.strerror or exc}") from None
    finally:
        theirs.close()
    agent = _Agent(meet, channel, ours)
    exited = os.pidfd_open(pid)
    try:
        _serve(agent, exited)
    finally:
        ours.close()
        os.close(exited)
    _, status, usage = os.wait4(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if agent.failure is not None:
        raise AgentFailure(agent.failure)
    if code == 0:
        return agent.briefcases[0]
    output = output_since(output_start)
    if code < 0 and -code in CRASHES:
        name = signal.Signals(-code).name
        raise AgentFailure(_crash_message(name, CRASHES[signal.Signals(-code)], output),
                           _symbolize(output, path, program_name(meet.briefcase)))
    cpu_seconds = channel.plan.limits.cpu_seconds if channel.plan is not None else 0
    cpu_used = usage.ru_utime + usage.ru_stime
    if code < 0:
        raise AgentFailure(describe_exit(code, cpu_seconds, cpu_used, "C agent"), output,
                           kind=AgentKilled.kind)
    raise AgentFailure(f"C agent exited with status {code}", output)


def _serve(agent: _Agent, exited: int) -> None:
    """Answer the agent's calls until its process exits (not merely closes the socket: a
    child it left behind holding the socket does not keep the meet open)."""
    sock = agent.sock.fileno()
    while True:
        readable, _, _ = select.select([sock, exited], [], [])
        if sock in readable:
            try:
                request = agent.receive()
            except (EOFError, ConnectionError):
                select.select([exited], [], [])  # the socket closed; wait for the exit
                return
            try:
                while request is not None:
                    agent.reply(request)
                    request = agent.pending()
            except OSError:  # it died before taking its reply
                select.select([exited], [], [])
                return
        elif exited in readable:
            return


if __name__ == "__main__":
    zygote.main(run)
