"""Worker processes: one OS process per meet, pre-started in a pool.

TACOMA spent about half of its 21.7 ms meet creating a process (fork, exec, loading the
interpreter: steps 3, 8 and 10a of its Table 1) and proposed taking that off the critical
path. So each interpreter has a `WorkerPool` of processes that are already started, already
confined (`_sandbox.enter`) and already connected to the place over a socketpair; a meet
takes one, hands it the briefcase, and the pool starts a replacement in the background.
A worker serves exactly one meet and is then destroyed: a fresh address space per meet.

Replacements are forked by the language's `Zygote`, an interpreter started once, warmed up
and never given an agent (see _zygote): a fork and the sandbox set-up cost a few
milliseconds where an exec and an interpreter start cost tens, so a busy place does not
spend its CPUs starting interpreters.

Who an agent is: as root, every worker switches to a uid and gid of its own (`AgentUids`)
before it says Hello, so agents can neither signal the place nor each other, nor read what
only root may; the place hands it its working directory. If the interpreter lives below a
directory others may not enter, the worker is told which paths to reveal (see _sandbox).

Containment of what an agent starts:
- every worker leads its own session and process group; `destroy` kills the group;
- as root, every worker also gets a pids cgroup of its own (`PidsCgroups`): it caps the
  number of processes (RLIMIT_NPROC does not bind root) and lists every process the agent
  made, including ones that left the group with setsid, so `destroy` kills them all;
- not as root, RLIMIT_NPROC counts the user's processes, so the worker's limit is set to what
  the user runs now plus the configured allowance.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import json
import logging
import os
import shutil
import signal
import socket
import stat
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import msgpack

from ..agent import _sandbox
from ..agent._interpreter import Interpreter, worker_sys_path
from ..agent._sandbox import describe_exit
from ..agent._zygote import MAX_CONTROL
from ..client._transport import Channel
from ..wire._briefcase import Briefcase
from ..wire._errors import (
    AgentFailed,
    AgentKilled,
    ConnectionLost,
    MeetTimeout,
    PlaceUnavailable,
    ProtocolError,
    error_from_wire,
)
from ..wire._protocol import Event, Failed, Log, Meet, Result, Role
from ._settings import PlaceSettings

if TYPE_CHECKING:
    from ._builds import Builds
    from ._trips import Trip

__all__ = ["PidsCgroups", "Worker", "WorkerPool"]

log = logging.getLogger("tacoma.place")

#: Bytes of an agent's stdout/stderr returned with an error: enough for a traceback.
OUTPUT_TAIL = 4096
#: The failure kinds a worker may report about its own agent (a worker that runs the agent
#: as a child process, as ag_c's does, reports its death); anything else is an AgentFailed.
WORKER_KINDS = frozenset({AgentFailed.kind, AgentKilled.kind, "limit-exceeded"})
#: Longest line an agent may write to the place's log, and how many lines and characters
#: one meet may write in all (the log is the place's, not a channel for an agent to fill);
#: past that its lines are counted, not written.
LOG_LINE = 4096
LOG_LINES_PER_MEET = 1000
LOG_CHARS_PER_MEET = 1 << 20
#: How long a new worker may take to start and say Hello.
START_TIMEOUT = 30.0

NestedHandler = Callable[["Worker", Meet], Awaitable[None]]


# --------------------------------------------------------------------------- cgroups
class PidsCgroups:
    """Per-worker pids cgroups under `<hierarchy>/tacoma/<place pid>/`, when root.

    Works with a cgroup v1 pids hierarchy or a cgroup v2 one where the pids controller can
    be enabled. `available()` returns None (with the reason logged) where neither works.
    """

    def __init__(self, base: Path, v2: bool) -> None:
        self.base = base
        self.v2 = v2
        self._n = 0

    @classmethod
    def available(cls) -> PidsCgroups | None:
        if os.geteuid() != 0:
            return None
        try:
            root, v2 = cls._find_hierarchy()
            top = root / "tacoma"
            top.mkdir(exist_ok=True)
            if v2:
                cls._enable_pids(root)
                cls._enable_pids(top)
            cls._sweep(top)
            base = top / str(os.getpid())
            base.mkdir(exist_ok=True)
            if v2:
                cls._enable_pids(base)
            return cls(base, v2)
        except (OSError, LookupError) as exc:
            log.warning("no pids cgroup for agents (%s); process counts rely on rlimits", exc)
            return None

    @staticmethod
    def _find_hierarchy() -> tuple[Path, bool]:
        v2_root = None
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fstype, _, options = right.split(" ", 2)
                mount_point = Path(left.split(" ")[4])
                if fstype == "cgroup" and "pids" in options.strip().split(","):
                    return mount_point, False
                if fstype == "cgroup2":
                    v2_root = mount_point
        if v2_root is not None and "pids" in (v2_root / "cgroup.controllers").read_text():
            return v2_root, True
        raise LookupError("no cgroup hierarchy with the pids controller is mounted")

    @staticmethod
    def _enable_pids(path: Path) -> None:
        if "pids" not in (path / "cgroup.subtree_control").read_text().split():
            (path / "cgroup.subtree_control").write_text("+pids")

    @classmethod
    def _sweep(cls, top: Path) -> None:
        """Kill and remove cgroups left by places that died without cleaning up."""
        for place_dir in top.iterdir():
            if not place_dir.is_dir() or not place_dir.name.isdigit():
                continue
            alive = Path(f"/proc/{place_dir.name}").exists()
            if alive and place_dir.name != str(os.getpid()):  # a place with our pid was
                continue                                      # before us (containers)
            for worker_dir in place_dir.iterdir():
                if worker_dir.is_dir():
                    cls._kill_sync(worker_dir)
            with contextlib.suppress(OSError):
                place_dir.rmdir()

    @staticmethod
    def _kill_sync(path: Path) -> None:
        _sandbox.kill_cgroup(str(path))
        with contextlib.suppress(OSError):
            path.rmdir()

    def create(self, processes: int) -> Path:
        while True:
            self._n += 1
            path = self.base / f"w{self._n}"
            try:
                path.mkdir()
                break
            except FileExistsError:  # left by a place that had our pid; swept, or in use
                continue
        (path / "pids.max").write_text(str(processes))
        return path

    async def destroy(self, path: Path) -> None:
        """Kill every process in the cgroup, wait until it is empty, and remove it."""
        for _ in range(500):
            if not _sandbox.cgroup_members(str(path)):
                break
            _sandbox.kill_cgroup(str(path), rounds=1)
            await asyncio.sleep(0.01)  # killed processes leave the cgroup once reaped
        for _ in range(100):
            try:
                path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                await asyncio.sleep(0.01)
        log.warning("could not remove cgroup %s", path)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.base.rmdir()


class AgentUids:
    """Uids for agents: one per worker, from a block of 65,536 chosen by the place's pid.

    The blocks start at 0x70000000, far above the uids of real users and services (Debian
    hands out up to 60,000; 65,534 is nobody), and a place cycles through its own block.
    """

    BASE = 0x70000000

    def __init__(self, settings: PlaceSettings, module_paths: list[str]) -> None:
        self.base = self.BASE + (os.getpid() % 2048) * 65536
        self._n = 0
        self.live: set[int] = set()
        self.cover = self.cover_plan([*self.interpreter_paths(), *module_paths,
                                      str(settings.work_dir), str(settings.cache_dir),
                                      str(settings.data_dir)])

    def next(self) -> int:
        """A uid no live agent (nor compile) of this place has."""
        for _ in range(65535):
            self._n = self._n % 65535 + 1
            uid = self.base + self._n
            if uid not in self.live:
                self.live.add(uid)
                return uid
        raise PlaceUnavailable("every agent uid of this place is in use")

    def release(self, uid: int) -> None:
        self.live.discard(uid)

    @staticmethod
    def interpreter_paths() -> list[str]:
        """What a Python worker reads after it dropped root: the installation, sys.path."""
        return [sys.prefix, sys.base_prefix, sys.exec_prefix,
                *(p for p in sys.path if os.path.isabs(p))]

    @staticmethod
    def cover_plan(paths: list[str]) -> list[tuple[str, list[str]]]:
        """For each outermost directory others may not enter, the needed paths below it."""
        # A directory others may not enter is no use to reveal (the agent could not enter
        # it anyway), and kept as a path it would hide the paths below it that are needed
        # (the place's cwd, on sys.path, being a 0700 checkout holding tacoma, say).
        real = sorted({os.path.realpath(p) for p in paths if os.path.exists(p)
                       and (not os.path.isdir(p) or os.stat(p).st_mode & stat.S_IXOTH)})
        kept: list[str] = []
        for path in real:  # sorted, so an ancestor comes before what it contains
            if not any(path == k or path.startswith(k.rstrip("/") + "/") for k in kept):
                kept.append(path)
        cover: dict[str, list[str]] = {}
        for path in kept:
            parts = Path(path).parts
            for i in range(2, len(parts)):
                ancestor = os.path.join(*parts[:i])
                if not os.stat(ancestor).st_mode & stat.S_IXOTH:
                    cover.setdefault(ancestor, []).append(path)
                    break
        return sorted(cover.items())


def _user_process_count() -> int:
    uid = os.getuid()
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if entry.stat().st_uid == uid:
                    count += 1
    return count


# --------------------------------------------------------------------------- zygotes
class Zygote:
    """The place's end of a language's zygote (see _zygote): it forks the workers.

    Started once per pool by exec'ing the interpreter's worker command; thereafter a worker
    costs a fork and the sandbox set-up instead of an exec and an interpreter start.
    """

    def __init__(self, interpreter: Interpreter, settings: PlaceSettings,
                 place_address: str) -> None:
        self.interpreter = interpreter
        self.settings = settings
        self.place_address = place_address
        self.proc: asyncio.subprocess.Process | None = None
        self.sock: socket.socket | None = None
        self.output = settings.work_dir / f"zygote-{interpreter.language}.out"
        self._ready: asyncio.Future[None] | None = None
        self._spawning: dict[int, asyncio.Future[int]] = {}
        self._exits: dict[int, asyncio.Future[int]] = {}
        self.cpu_used: dict[int, float] = {}  # by worker pid, once it ended
        self._ids = 0
        self.dead = False

    @property
    def alive(self) -> bool:
        return self.proc is not None and not self.dead

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ours.setblocking(False)
        self.sock = ours
        self._ready = loop.create_future()
        plan = {"zygote": True, "parent": os.getpid(), "control_fd": theirs.fileno()}
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
        try:
            with open(self.output, "wb") as out:
                self.proc = await asyncio.create_subprocess_exec(
                    *self.interpreter.worker_argv(), json.dumps(plan),
                    pass_fds=(theirs.fileno(),), cwd=self.settings.work_dir, env=env,
                    stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out,
                    start_new_session=True)
        except (OSError, LookupError) as exc:
            ours.close()
            raise PlaceUnavailable(f"cannot start the {self.interpreter.language} "
                                   f"interpreter: {exc}") from exc
        finally:
            theirs.close()
        loop.add_reader(ours.fileno(), self._readable)
        exited: asyncio.Future[Any] = asyncio.ensure_future(self.proc.wait())
        try:
            await asyncio.wait({self._ready, exited}, timeout=START_TIMEOUT,
                               return_when=asyncio.FIRST_COMPLETED)
            if not self._ready.done():
                raise PlaceUnavailable(f"the {self.interpreter.language} interpreter did "
                                       "not start", _tail(self.output))
        except BaseException:  # not started, or the meet waiting for it was cancelled
            await asyncio.shield(self.close())
            raise
        finally:
            exited.cancel()

    async def spawn(self, plan: dict[str, Any], fds: list[int]) -> tuple[int, asyncio.Future[int]]:
        """Fork a worker with this plan and descriptors: its pid and a future of its exit."""
        if not self.alive or self.sock is None:
            raise PlaceUnavailable(f"the {self.interpreter.language} zygote is not running")
        self._ids += 1
        request = self._ids
        spawned = asyncio.get_running_loop().create_future()
        self._spawning[request] = spawned
        message = msgpack.packb({"op": "spawn", "id": request, "plan": plan},
                                use_bin_type=True)
        try:
            while True:
                try:
                    socket.send_fds(self.sock, [message], fds)
                    break
                except BlockingIOError:  # the zygote is behind: wait until it reads
                    await asyncio.sleep(0.001)
            pid = await asyncio.wait_for(spawned, START_TIMEOUT)
        except TimeoutError:
            raise PlaceUnavailable(f"the {self.interpreter.language} zygote did not fork a "
                                   f"worker within {START_TIMEOUT:g} s") from None
        finally:
            self._spawning.pop(request, None)
        exit_future = self._exits.get(pid)
        if exit_future is None:  # the zygote died, and the worker with it, as it reported
            raise PlaceUnavailable(f"the {self.interpreter.language} zygote died")
        return pid, exit_future

    def _readable(self) -> None:
        assert self.sock is not None
        while True:
            try:
                data = self.sock.recv(MAX_CONTROL)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self._died()
                return
            message = msgpack.unpackb(data, raw=False)
            op = message.get("op")
            if op == "ready" and self._ready is not None and not self._ready.done():
                self._ready.set_result(None)
            elif op == "spawned":
                pid = int(message["pid"])
                self._exits[pid] = asyncio.get_running_loop().create_future()
                future = self._spawning.get(int(message["id"]))
                if future is not None and not future.done():
                    future.set_result(pid)
            elif op == "exited":
                self.cpu_used[int(message["pid"])] = float(message.get("cpu", 0.0))
                exit_future = self._exits.pop(int(message["pid"]), None)
                if exit_future is not None and not exit_future.done():
                    exit_future.set_result(int(message["status"]))

    def _died(self, expected: bool = False) -> None:
        """The zygote is gone, and with it (parent-death signal) every worker it forked."""
        if self.dead:
            return
        self.dead = True
        if self.sock is not None:
            asyncio.get_running_loop().remove_reader(self.sock.fileno())
            self.sock.close()
        for future in self._spawning.values():
            if not future.done():
                future.set_exception(PlaceUnavailable(
                    f"the {self.interpreter.language} zygote died", _tail(self.output)))
        for future in self._exits.values():
            if not future.done():
                future.set_result(-signal.SIGKILL)
        self._exits.clear()
        if not expected:
            log.warning("the %s zygote ended; a new one starts with the next worker",
                        self.interpreter.language)

    async def close(self) -> None:
        self._died(expected=True)
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            await self.proc.wait()
        with contextlib.suppress(OSError):
            self.output.unlink()


@contextlib.contextmanager
def _private_output(path: Path, readable: bool = False) -> Iterator[BinaryIO]:
    """A new output file for an agent process: the place's, mode 0600, so no other agent
    can read it, whatever its uid (the process writes through the descriptor it is given)."""
    flags = (os.O_RDWR if readable else os.O_WRONLY) | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    with open(os.open(path, flags, 0o600), "w+b" if readable else "wb") as f:
        yield f


def _tail(path: Path) -> str:
    """The end of a process's output file: enough for a traceback."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - OUTPUT_TAIL))
            tail = f.read()
    except OSError:
        return ""
    text = tail.decode("utf-8", "replace").strip()
    return ("...\n" if size > OUTPUT_TAIL else "") + text if text else ""


# --------------------------------------------------------------------------- workers
class Worker:
    """One forked, confined agent process waiting for its meet, and the place's end of it."""

    def __init__(self, pool: WorkerPool, workdir: Path, output: Path,
                 cgroup: Path | None) -> None:
        self.pool = pool
        self.workdir = workdir
        self.output = output
        self.cgroup = cgroup
        self.pid = 0
        self.exited: asyncio.Future[int] | None = None
        self.channel: Channel | None = None
        self.meet_id = ""
        self.installed_as: str | None = None  # the installed agent it runs, if it is one
        self.program = b""  # the program it runs
        self.resident: str | None = None  # its name while it is a resident agent
        self.trip: Trip | None = None  # the trip it is on, if it moves (see _trips)
        self.went: str | None = None  # where it went, once it moved on
        self.going = False  # while its go is under way
        self.started = 0.0  # time.time() when its meet began
        self.deadline = 0.0  # time.monotonic() by which its meet must end
        self._identity: str | None = None
        self.uid: int | None = None
        self._reply: asyncio.Future[Result | Failed] | None = None
        self._nested: NestedHandler | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.destroyed = False
        self._logged_lines = self._logged_chars = self._dropped_lines = 0

    @property
    def identity(self) -> str:
        """Who the agent is, for the cabinets it may reach: `agent:NAME` for an installed
        agent, else `code:` and its program's hash (hashed when first asked: most meets
        never ask)."""
        if self.installed_as is not None:
            return f"agent:{self.installed_as}"
        if self._identity is None:
            self._identity = "code:" + hashlib.sha256(self.program).hexdigest()
        return self._identity

    @property
    def alive(self) -> bool:
        return (self.exited is not None and not self.exited.done()
                and self.channel is not None and not self.channel.is_closing)

    async def run(self, meet: Meet, timeout: float, meet_id: str,
                  nested: NestedHandler, trace: list[tuple[str, int]] | None = None) -> Result:
        """Hand this worker its meet and wait for the answer, the process's end or timeout.

        With `trace`, appends ("hand to worker", ns) and ("_waited", ns): the time from the
        Meet written to the answer taken (see _trace)."""
        assert self.exited is not None
        assert self.channel is not None
        loop = asyncio.get_running_loop()
        self.meet_id = meet_id
        self._nested = nested
        reply: asyncio.Future[Result | Failed] = loop.create_future()
        self._reply = reply
        exited = self.exited
        handing = Meet(1, meet.agent, meet.briefcase, "sync", timeout)
        if trace is None:
            self.channel.send(handing)
        else:
            started = time.perf_counter_ns()
            self.channel.write(self.channel.conn.send(handing))
            handed = time.perf_counter_ns()
            trace.append(("hand to worker", handed - started))
        waits: set[asyncio.Future[Any]] = {reply, exited}
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if trace is not None:
            trace.append(("_waited", time.perf_counter_ns() - handed))
        if not reply.done() and exited.done():
            # The process ended; its last frames may still be on the way to us.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.channel.closed), 1.0)
        if reply.done() and reply.exception() is None:
            answer = reply.result()
            if isinstance(answer, Failed):
                if answer.kind not in WORKER_KINDS:  # a worker cannot speak for the place
                    raise AgentFailed(f"agent failed: {answer.message}", answer.detail)
                raise error_from_wire(answer.kind, answer.message, answer.detail)
            return answer
        if exited.done() or reply.done():
            if not exited.done():
                # The channel closed first; the process's exit status follows shortly.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(exited), 2.0)
            if not exited.done():  # the channel failed but the process lives on
                raise AgentKilled(f"agent broke the worker protocol: {reply.exception()}")
            zygote = self.pool.zygote
            cpu_used = zygote.cpu_used.pop(self.pid, 0.0) if zygote is not None else 0.0
            raise AgentKilled(describe_exit(exited.result(),
                                            self.pool.settings.limits.cpu_seconds, cpu_used),
                              self.output_tail())
        raise MeetTimeout(f"agent did not finish within {timeout:g} s; "
                          "its processes were killed")

    def moved_on(self, place: str) -> None:
        """The agent went to `place`: its meet here is over now (its process ends by
        itself, and is destroyed with the worker)."""
        self.went = place
        if self._reply is not None and not self._reply.done():
            self._reply.set_result(Result(1, Briefcase()))

    def output_tail(self) -> str:
        """The end of what the agent wrote to stdout and stderr."""
        return _tail(self.output)

    def usage(self) -> tuple[int, float, int]:
        """(processes, CPU seconds, resident bytes) of the agent: every process in its
        cgroup, or its worker process alone where there is none."""
        pids = [self.pid]
        if self.cgroup is not None:
            with contextlib.suppress(OSError, ValueError):
                pids = [int(p) for p in (self.cgroup / "cgroup.procs").read_text().split()]
        ticks, page = os.sysconf("SC_CLK_TCK"), os.sysconf("SC_PAGE_SIZE")
        cpu, rss, alive = 0.0, 0, 0
        for pid in pids:
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
                statm = Path(f"/proc/{pid}/statm").read_text()
            except OSError:  # ended meanwhile
                continue
            fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
            cpu += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
            rss += int(statm.split()[1]) * page
            alive += 1
        return alive, cpu, rss

    # -- EventHandler for the worker channel
    def event_received(self, channel: Channel, event: Event) -> None:
        if isinstance(event, Result | Failed):
            if self._reply is not None and not self._reply.done():
                self._reply.set_result(event)
        elif isinstance(event, Log):
            self._log(event)
        elif isinstance(event, Meet) and self._nested is not None:
            task = asyncio.ensure_future(self._nested(self, event))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _log(self, event: Log) -> None:
        """Write an agent's line to the place's log, within the meet's budget."""
        if (self._logged_lines >= LOG_LINES_PER_MEET
                or self._logged_chars >= LOG_CHARS_PER_MEET):
            self._dropped_lines += 1
            return
        # Control characters are escaped, so an agent cannot forge lines of the log.
        text = event.message[:LOG_LINE].encode("unicode_escape").decode("ascii")
        if len(event.message) > LOG_LINE:
            text = f"{text}... ({len(event.message) - LOG_LINE:,} more)"
        self._logged_lines += 1
        self._logged_chars += len(text)
        log.log(logging.getLevelName(event.level.upper()), "[%s] %s", self.meet_id, text)

    def channel_closed(self, channel: Channel, exc: BaseException | None) -> None:
        if self._reply is not None and not self._reply.done():
            reason = channel.close_reason or "channel closed"
            self._reply.set_exception(ConnectionLost(reason))
            self._reply.exception()

    def answer(self, event: Result | Failed | Event) -> None:
        """Send the reply to a nested meet, if the worker is still there to get it."""
        if self.channel is not None and not self.channel.is_closing:
            try:
                self.channel.send(event)
            except (ProtocolError, ValueError) as exc:
                if isinstance(event, Result | Failed):
                    self.channel.send(Failed(event.rid, "limit-exceeded", str(exc)))

    async def destroy(self) -> None:
        """Kill everything this worker started and remove its files."""
        if self.destroyed:
            return
        self.destroyed = True
        if self._dropped_lines:
            log.warning("[%s] %d more log lines from the agent were dropped (at most %d "
                        "lines, %d characters a meet)", self.meet_id, self._dropped_lines,
                        LOG_LINES_PER_MEET, LOG_CHARS_PER_MEET)
        for task in list(self._tasks):
            task.cancel()
        if self.channel is not None:
            self.channel.close()
        if self.pid and self.exited is not None and not self.exited.done():
            # Only while the zygote has not reported it reaped: after that the pid may be
            # reused. What the agent left behind is then killed through its cgroup.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
        if self.cgroup is not None and self.pool.cgroups is not None:
            await self.pool.cgroups.destroy(self.cgroup)
        if self.exited is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.exited), 10)
        try:
            await asyncio.to_thread(shutil.rmtree, self.workdir, True)
        except RuntimeError:  # at interpreter exit no new threads can start: do it here
            shutil.rmtree(self.workdir, True)
        with contextlib.suppress(OSError):
            self.output.unlink()
        if self.uid is not None and self.pool.uids is not None:
            self.pool.uids.release(self.uid)  # its processes are gone: the uid is free


class WorkerPool:
    """Ready workers for one interpreter; each is used once, replacements start off-path."""

    def __init__(self, interpreter: Interpreter, settings: PlaceSettings,
                 cgroups: PidsCgroups | None, uids: AgentUids | None,
                 place_address: str, builds: Builds | None = None) -> None:
        self.interpreter = interpreter
        self.builds = builds
        self.settings = settings
        self.cgroups = cgroups
        self.uids = uids
        self.place_address = place_address
        self.zygote: Zygote | None = None
        self._zygote_lock = asyncio.Lock()
        self._ready: collections.deque[Worker] = collections.deque()
        self._starting = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        self._failures = 0

    def fill(self) -> None:
        """Start workers in the background until `pool_size` are ready or starting."""
        while (not self._closed and self._failures < 3
               and len(self._ready) + self._starting < self.settings.pool_size):
            self._starting += 1
            self._track(self._start_into_pool())

    def _track(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _start_into_pool(self) -> None:
        try:
            worker = await self.start_worker()
        except PlaceUnavailable as exc:
            self._failures += 1
            log.error("%s%s", exc, f":\n{exc.detail}" if exc.detail else "")
            return
        except Exception:
            self._failures += 1
            log.exception("cannot start a %s worker", self.interpreter.language)
            return
        finally:
            self._starting -= 1
        self._failures = 0
        if self._closed:
            await worker.destroy()
        else:
            self._ready.append(worker)

    async def take(self) -> Worker:
        """A ready worker (or a freshly started one if none is ready)."""
        self._failures = 0
        while self._ready:
            worker = self._ready.popleft()
            if worker.alive:
                return worker
            self._track(worker.destroy())
        return await self.start_worker()

    def release(self, worker: Worker) -> None:
        """Destroy a used worker and start its replacement, after the meet has its answer.

        Both happen here rather than in `take` so that the replacement's fork and set-up do
        not compete with the meet it replaces.
        """
        self._track(worker.destroy())
        self.fill()

    async def _live_zygote(self) -> Zygote:
        async with self._zygote_lock:
            if self._closed:
                raise PlaceUnavailable("the place is shutting down")
            if self.zygote is None or not self.zygote.alive:
                zygote = Zygote(self.interpreter, self.settings, self.place_address)
                await zygote.start()
                self.zygote = zygote
            return self.zygote

    def sandbox_plan(self, workdir: Path, uid: int | None, cgroup: Path | None) -> dict[str, Any]:
        """What `_sandbox.enter` applies to a process of this pool's agents (or builds)."""
        limits = self.settings.limits
        return {
            "workdir": str(workdir),
            "env": {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(workdir),
                    "TMPDIR": str(workdir), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
                    "TACOMA_DATA": str(self.settings.data_dir)},
            "place": self.place_address,
            "max_frame": self.settings.max_frame,
            "cgroup": str(cgroup) if cgroup is not None else None,
            "uid": uid,
            "reveal": self.uids.cover if self.uids is not None else [],
            "nproc": (limits.processes if uid is not None
                      else None if os.geteuid() == 0
                      else _user_process_count() + limits.processes),
            "limits": {"cpu_seconds": limits.cpu_seconds,
                       "memory_bytes": limits.memory_bytes,
                       "file_bytes": limits.file_bytes,
                       "open_files": limits.open_files},
        }

    @contextlib.asynccontextmanager
    async def confined(self, argv: list[str], files: dict[str, bytes],
                       timeout: float) -> AsyncIterator[tuple[int, Path, Path]]:
        """Run `argv` confined like one of this pool's agents (own uid, cgroup, limits,
        private directory holding `files`), and yield its exit status, its directory and
        its output file, which are removed when the block ends.

        For work the place does on an agent's behalf with the agent's input, such as
        compiling its program. Raises MeetTimeout (the processes killed) after `timeout`.
        """
        settings = self.settings
        workdir = Path(tempfile.mkdtemp(prefix=f"{self.interpreter.language}-build-",
                                        dir=settings.work_dir))
        output = workdir.with_name(workdir.name + ".out")
        cgroup: Path | None = None
        proc: asyncio.subprocess.Process | None = None
        uid = self.uids.next() if self.uids is not None else None
        try:
            for name, data in files.items():
                (workdir / name).write_bytes(data)
                if uid is not None:
                    os.chown(workdir / name, uid, uid)
            if uid is not None:
                os.chown(workdir, uid, uid)
            if self.cgroups is not None:
                cgroup = self.cgroups.create(settings.limits.processes)
            plan = {**self.sandbox_plan(workdir, uid, cgroup), "argv": argv,
                    "parent": os.getpid()}
            boot = (f"import sys; sys.path[:0] = {worker_sys_path()!r}; "
                    "from tacoma.agent._sandbox import exec_plan; exec_plan()")
            with _private_output(output) as out:
                proc = await asyncio.create_subprocess_exec(
                    sys.executable, "-I", "-S", "-B", "-c", boot, json.dumps(plan),
                    cwd=workdir, env=plan["env"], stdin=asyncio.subprocess.DEVNULL,
                    stdout=out, stderr=out, start_new_session=True)
            try:
                returncode = await asyncio.wait_for(proc.wait(), timeout)
            except TimeoutError:
                raise MeetTimeout(f"{argv[0]} did not finish within {timeout:g} s; "
                                  "its processes were killed") from None
            if cgroup is not None and self.cgroups is not None:
                await self.cgroups.destroy(cgroup)  # nothing it started runs on
                cgroup = None
            yield returncode, workdir, output
        finally:
            if proc is not None and proc.returncode is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()
            if cgroup is not None and self.cgroups is not None:
                await self.cgroups.destroy(cgroup)
            await asyncio.to_thread(shutil.rmtree, workdir, True)
            with contextlib.suppress(OSError):
                output.unlink()
            if uid is not None and self.uids is not None:
                self.uids.release(uid)

    async def start_worker(self) -> Worker:
        """Fork a worker from the zygote, confined and connected, ready for one meet."""
        try:
            return await self._start_worker()
        except OSError as exc:
            raise PlaceUnavailable(f"cannot start a {self.interpreter.language} worker: "
                                   f"{exc.strerror or exc}") from exc

    async def _start_worker(self) -> Worker:
        settings = self.settings
        limits = settings.limits
        zygote = await self._live_zygote()
        workdir = Path(tempfile.mkdtemp(prefix=f"{self.interpreter.language}-",
                                        dir=settings.work_dir))
        output = workdir.with_name(workdir.name + ".out")
        worker = Worker(self, workdir, output, None)
        ours = theirs = None
        try:
            uid = self.uids.next() if self.uids is not None else None
            worker.uid = uid
            if uid is not None:
                os.chown(workdir, uid, uid)
            if self.cgroups is not None:
                worker.cgroup = self.cgroups.create(limits.processes)
            cgroup = worker.cgroup
            ours, theirs = socket.socketpair()
            plan = self.sandbox_plan(workdir, uid, cgroup)
            if self.builds is not None and self.interpreter.build is not None:
                plan.update(self.builds.worker_plan(self.interpreter))
            with _private_output(output, readable=True) as out:  # its own output, to read
                worker.pid, worker.exited = await zygote.spawn(plan, [theirs.fileno(),
                                                                       out.fileno()])
            theirs.close()
            loop = asyncio.get_running_loop()
            _, worker.channel = await loop.create_unix_connection(
                lambda: Channel(Role.HOST, worker, settings.max_frame), sock=ours)
            waits: set[asyncio.Future[Any]] = {worker.channel.ready, worker.exited}
            await asyncio.wait(waits, timeout=START_TIMEOUT, return_when=asyncio.FIRST_COMPLETED)
            if not worker.channel.ready.done() or worker.channel.ready.exception():
                raise PlaceUnavailable(f"a {self.interpreter.language} worker did not start",
                                       worker.output_tail())
        except BaseException:
            for sock in (theirs, ours):
                if sock is not None:
                    sock.close()
            await asyncio.shield(worker.destroy())
            raise
        return worker

    async def close(self) -> None:
        self._closed = True
        for task in list(self._tasks):
            if not task.done():
                await asyncio.wait({task}, timeout=START_TIMEOUT)
        ready, self._ready = list(self._ready), collections.deque()
        await asyncio.gather(*(w.destroy() for w in ready), return_exceptions=True)
        if self.zygote is not None:
            await self.zygote.close()
