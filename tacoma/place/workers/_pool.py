"""Worker processes: one OS process per meet, pre-started in a pool.

TACOMA spent about half of its 21.7 ms meet creating a process (fork, exec, loading the
interpreter: steps 3, 8 and 10a of its Table 1) and proposed taking that off the critical
path. So each interpreter has a `WorkerPool` of processes that are already started, already
confined (agent._sandbox.enter) and already connected to the place over a socketpair; a
meet takes one, hands it the briefcase, and the pool starts a replacement in the background.
A worker serves one meet and is then destroyed: a fresh address space per meet; or, where
the place reuses workers, it is kept warm for later meets of the same principal and program
only (_warm).

Replacements are forked by the language's zygote (see _zygotes): a fork and the sandbox
set-up cost a few milliseconds where an exec and an interpreter start cost tens. Each
worker gets its uid, cgroups and plan from the place's `Containment`, leads its own session
and process group (and, as root, PID namespace), and `destroy` kills the group and
everything in its cgroup. While a meet runs, the place holds the agent to its CPU time for
all of its processes together (`Worker.run`), and tells a kill by the memory cgroup as such.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import os
import secrets
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

from ...agent import _sandbox
from ...agent._interpreter import Interpreter
from ...agent._plan import Artifacts
from ...agent._sandbox import describe_exit
from ...transport import Channel
from ...wire._briefcase import Briefcase
from ...wire._errors import (
    AgentFailed,
    AgentKilled,
    ConnectionLost,
    LimitExceeded,
    MeetTimeout,
    PlaceUnavailable,
    ProtocolError,
    TacomaError,
    error_from_wire,
)
from ...wire._protocol import Event, Failed, Keep, Log, Meet, Ready, Result, Role, heavy
from ._cgroups import Group
from ._containment import Containment, private_output, tail
from ._zygotes import START_TIMEOUT, ZygoteHandle

__all__ = ["GiveBack", "LogBudget", "Moved", "Worker", "WorkerPool"]

log = logging.getLogger("tacoma.place")

#: The failure kinds a worker may report about its own agent (a worker that runs the agent
#: as a child process, as ag_c's does, reports its death); anything else is an AgentFailed.
WORKER_KINDS = frozenset({AgentFailed.kind, AgentKilled.kind, LimitExceeded.kind})
#: Longest line an agent may write to the place's log, and how many lines and characters
#: one meet may write in all (the log is the place's, not a channel for an agent to fill);
#: past that its lines are counted, not written.
LOG_LINE = 4096
LOG_LINES_PER_MEET = 1000
LOG_CHARS_PER_MEET = 1 << 20


class LogBudget:
    """What the agents of each principal may write to the place's log together: a token
    bucket of characters per principal (RATE a second, at most BURST at once), so that many
    meets of one principal, each within its own bound, cannot flood the log either.
    Written here because it is a dozen lines; the standard library has no rate limiter."""

    RATE = 64 * 1024
    BURST = LOG_CHARS_PER_MEET
    KEEP = 4096  # principals remembered; past it the fullest buckets are forgotten

    def __init__(self) -> None:
        self._buckets: dict[str, tuple[float, float]] = {}  # principal: (tokens, when)

    def take(self, principal: str, chars: int) -> bool:
        """Whether `principal`'s agents may write `chars` more characters now."""
        now = time.monotonic()
        tokens, when = self._buckets.get(principal, (float(self.BURST), now))
        tokens = min(float(self.BURST), tokens + (now - when) * self.RATE)
        if tokens < chars:
            self._buckets[principal] = (tokens, now)
            return False
        if principal not in self._buckets and len(self._buckets) >= self.KEEP:
            self._buckets = {p: b for p, b in self._buckets.items()
                             if b[0] + (now - b[1]) * self.RATE < self.BURST}
        self._buckets[principal] = (tokens - chars, now)
        return True

#: The most memory a warm worker's cgroup may hold when it says Ready (or a quarter of the
#: agent's memory limit, if less): more is not kept idle.
WARM_MEMORY = 256 * 1024 * 1024
#: CPU seconds a warm worker may use between its Ready and its next meet (reading its
#: channel): more means something of its last meet runs on, and it is not taken.
IDLE_CPU = 0.05

#: Seconds without a meet that found no worker ready before a grown pool halves its size.
SHRINK_AFTER = 5.0

NestedHandler = Callable[["Worker", Meet], Awaitable[None]]
#: Gives back a meet's room in a pool (`WorkerPool.hold`): given its worker, if it got one,
#: and whether that worker is kept warm.
GiveBack = Callable[["Worker | None", bool], None]


@dataclasses.dataclass(frozen=True, slots=True)
class Moved:
    """How a worker's meet ends when its agent moved on: the next place took it (`to`).

    Whatever the process does after that (it ends by itself, or is killed with the worker)
    is no longer the meet's outcome here."""

    to: str


class HandedMeet(Protocol):
    """What a worker needs of the meet it serves (the place's RunningMeet)."""

    id: str
    agent: str
    briefcase: Briefcase
    principal: str

    def mark(self) -> None: ...

    def step(self, name: str) -> None: ...


class Worker:
    """One forked, confined agent process waiting for its meet, and the place's end of it."""

    def __init__(self, pool: WorkerPool, workdir: Path, output: Path,
                 on_disk: bool = True) -> None:
        self.pool = pool
        self.workdir = workdir
        self.on_disk = on_disk  # else only a name: the worker's own tmpfs holds it
        self.output = output
        self.group: Group | None = None
        self.uid: int | None = None
        self.pid = 0
        self.exited: asyncio.Future[int] | None = None
        self.channel: Channel | None = None
        self.meet: HandedMeet | None = None  # the meet it serves, once handed one
        self._reply: asyncio.Future[Result | Failed] | None = None
        self._nested: NestedHandler | None = None
        self._moved: Moved | None = None  # once its agent went on (see moved_on)
        self._went: asyncio.Future[None] | None = None  # wakes run when it does
        self._tasks: set[asyncio.Task[None]] = set()
        self.destroyed = False
        self._logged_lines = self._logged_chars = self._dropped_lines = 0
        #: Meets it served; when it started, and since when it waits idle, warm (_warm).
        self.served = 0
        self.born = time.monotonic()
        self.idle_since = 0.0
        #: Done when, after its last meet, it said Ready (clean again: a warm worker);
        #: failed if its channel closed first. None before its first meet.
        self.clean: asyncio.Future[None] | None = None
        self._cpu_at_start = 0.0  # its cgroup's CPU time when its meet began
        self.told_keep = False  # whether it heard Keep with its last meet
        self._cpu_at_ready = 0.0  # its cgroup's CPU time when it said Ready

    @property
    def alive(self) -> bool:
        return (self.exited is not None and not self.exited.done()
                and self.channel is not None and not self.channel.is_closing)

    async def run(self, meet: HandedMeet, timeout: float, nested: NestedHandler,
                  keep: bool = False) -> Result | Moved:
        """Hand this worker its meet and wait for the answer, the process's end or timeout:
        the agent's Result, or Moved once its agent went on to another place (however its
        process here ends after that). `keep`: tell the worker, with its meet, that the
        place means to keep it warm after it (Keep: it makes itself clean and says Ready).

        A traced meet gets the steps "hand to worker" (writing the Meet) and "_waited" (from
        the Meet written to the answer taken; see wire._trace)."""
        try:
            answer = await self._run(meet, timeout, nested, keep)
        except Exception:
            if self._moved is None:
                raise
            return self._moved  # it went on while its end here was being looked at
        finally:
            self._nested = None  # its meet is over: no meet of its agent is taken after
        return self._moved or answer

    def clean_now(self) -> bool:
        """Whether it said Ready after its last meet: clean, waiting for the next."""
        clean = self.clean
        return clean is not None and clean.done() and not clean.cancelled() \
            and clean.exception() is None

    async def until_clean(self) -> None:
        """Wait for its Ready (ConnectionLost if its channel closes first)."""
        assert self.clean is not None
        await self.clean

    async def _run(self, meet: HandedMeet, timeout: float, nested: NestedHandler,
                   keep: bool) -> Result | Moved:
        assert self.exited is not None
        assert self.channel is not None
        loop = asyncio.get_running_loop()
        self._end_meet()
        self.meet = meet
        self._nested = nested
        self.served += 1
        reply: asyncio.Future[Result | Failed] = loop.create_future()
        self._reply = reply
        self._went = went = loop.create_future()
        self.clean = loop.create_future()
        if self.group is not None and self.group.accounts_cpu:
            self._cpu_at_start = self.group.cpu_seconds()  # earlier meets' are not this one's
        exited = self.exited
        meet.mark()

        def refused(exc: TacomaError) -> None:  # the briefcase cannot reach the worker
            if not reply.done():
                reply.set_exception(exc)

        self.told_keep = keep
        event = Meet(self.served, meet.agent, meet.briefcase, "sync", timeout, meet.principal)
        if keep and not heavy(event):
            # Keep before the Meet (a worker whose meet ends at once may be gone after it,
            # and writing to its closed channel would lose the answer it left there), in
            # one write: the worker wakes once for both.
            kept = self.channel.conn.send(Keep())
            try:
                kept += self.channel.conn.send(event)
            except (LimitExceeded, ProtocolError) as exc:
                refused(exc)
            self.channel.write(kept)
        else:
            if keep:
                self.channel.send(Keep())
            # A large briefcase is encoded on a thread (see Channel.send): others go on
            # meanwhile.
            self.channel.send(event, refused)
        meet.step("hand to worker")
        waits: set[asyncio.Future[Any]] = {reply, exited, went}
        watch = self._watch_cpu() if self.group is not None and self.group.accounts_cpu \
            else None
        if watch is not None:
            waits.add(watch)
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if watch is not None:
                watch.cancel()
        meet.step("_waited")
        if self._moved is not None:  # its agent went on: whatever else happened here
            return self._moved
        limits = self.pool.settings.limits
        if watch is not None and watch.done() and not watch.cancelled() and watch.result():
            raise AgentKilled(f"agent killed: its CPU time limit of {limits.cpu_seconds} s "
                              "was reached (all its processes together)", self.output_tail())
        if not reply.done() and exited.done():
            # The process ended; its last frames may still be on the way to us.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.channel.closed), 1.0)
        if reply.done() and reply.exception() is None:
            answer = reply.result()
            if isinstance(answer, Failed):
                if answer.kind not in WORKER_KINDS:  # a worker cannot speak for the place
                    raise AgentFailed(f"agent failed: {answer.message}", answer.detail)
                if answer.kind == AgentKilled.kind and self.killed_for_memory():
                    raise AgentKilled(self._memory_message(), answer.detail)
                raise error_from_wire(answer.kind, answer.message, answer.detail)
            return answer
        if exited.done() or reply.done():
            if not exited.done():
                # The channel closed first; the process's exit status follows shortly.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(exited), 2.0)
            if not exited.done():  # the channel failed but the process lives on
                raise AgentKilled(f"agent broke the worker protocol: {reply.exception()}")
            if self.killed_for_memory():
                raise AgentKilled(self._memory_message(), self.output_tail())
            zygote = self.pool.zygote
            cpu_used = zygote.cpu_used.pop(self.pid, 0.0) if zygote is not None else 0.0
            raise AgentKilled(describe_exit(exited.result(), limits.cpu_seconds, cpu_used),
                              self.output_tail())
        raise MeetTimeout(f"agent did not finish within {timeout:g} s; "
                          "its processes were killed")

    def _watch_cpu(self) -> asyncio.Task[bool]:
        """A task that kills the agent once all its processes together have used its CPU
        time (True then). The CPU cgroup's quota bounds how fast they can use it, so the
        cgroup is read only when the limit could have been reached, not polled."""
        assert self.group is not None
        group, limits = self.group, self.pool.settings.limits
        start = self._cpu_at_start  # the worker's start-up, and earlier meets, are not its

        async def watch() -> bool:
            used = 0.0  # nothing yet: the first look is when the limit could be reached
            while True:
                await asyncio.sleep(max(0.05, (limits.cpu_seconds - used) / limits.cpus))
                used = group.cpu_seconds() - start
                if used >= limits.cpu_seconds:
                    _sandbox.kill_cgroup(group.kill_dir)
                    return True

        return asyncio.ensure_future(watch())

    def killed_for_memory(self) -> bool:
        """Whether the memory limit killed one of its processes (in any of its meets)."""
        return self.group is not None and self.group.oom_kills() > 0

    def _memory_message(self) -> str:
        limit = self.pool.settings.limits.memory_bytes
        return (f"agent killed by its memory limit of {limit / 2**20:g} MiB (all its "
                "processes together, and what it wrote to its tmpfs)")

    def moved_on(self, to: str) -> None:
        """Its agent went on to the place `to`: its meet here is over now, Moved (its
        process ends by itself, and is destroyed with the worker)."""
        self._moved = Moved(to)
        if self._went is not None and not self._went.done():
            self._went.set_result(None)

    def output_tail(self) -> str:
        """The end of what the agent wrote to stdout and stderr."""
        return tail(self.output)

    @property
    def warm(self) -> bool:
        """Whether its meet is not its first: a warm worker (_warm)."""
        return self.served > 1

    def usage(self) -> tuple[int, float, int]:
        """(processes, CPU seconds, resident bytes) of the agent's meet: every process in
        its cgroup, or its worker process alone where there is none; the CPU time its meet
        used where the cgroup counts it, else its processes' whole."""
        pids = [self.pid]
        if self.group is not None:
            with contextlib.suppress(OSError, ValueError):
                pids = [int(p) for p in
                        Path(self.group.kill_dir, "cgroup.procs").read_text().split()]
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
        if self.group is not None and self.group.accounts_cpu:
            cpu = self.group.cpu_seconds() - self._cpu_at_start
        return alive, cpu, rss

    # -- EventHandler for the worker channel
    def event_received(self, channel: Channel, event: Event) -> None:
        if isinstance(event, Result | Failed):
            if self._reply is not None and not self._reply.done():
                self._reply.set_result(event)
        elif isinstance(event, Ready):
            self._ready()
        elif isinstance(event, Log):
            self._log(event)
        elif isinstance(event, Meet) and self._nested is not None:
            task = asyncio.ensure_future(self._nested(self, event))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        elif isinstance(event, Meet):  # from a worker with no meet: nobody's, and not kept
            channel.close("a meet from a worker between meets")

    def _ready(self) -> None:
        """A warm worker says it is clean after its meet (`agent._reuse`). The place does
        not take its word for what it can see itself: its cgroup must hold the worker alone
        (an agent that subverted the cleaning left no process behind) and little memory;
        from now on it must use no CPU until its next meet (`quiet`)."""
        clean = self.clean
        if clean is None or clean.done():
            return
        if self.pool.interpreter.instances:
            # Its meets ran in fresh instances of a runtime, which make no process and
            # leave nothing running, and whose memory went with their stores.
            clean.set_result(None)
            return
        why = self._not_clean()
        if why is not None:
            clean.set_exception(ConnectionLost(f"not kept warm: {why}"))
            clean.exception()
            return
        if self.group is not None and self.group.accounts_cpu:
            self._cpu_at_ready = self.group.cpu_seconds()
        clean.set_result(None)

    def _not_clean(self) -> str | None:
        """What of the worker, seen from outside, is not as a clean warm worker's is."""
        if self.group is None:
            return None
        members = _sandbox.cgroup_members(self.group.kill_dir)
        if members != [self.pid]:
            return f"its cgroup holds {len(members)} processes"
        memory = self.group.memory_bytes()
        most = min(WARM_MEMORY, self.pool.settings.limits.memory_bytes // 4)
        if memory is not None and memory > most:
            return f"it holds {memory / 2**20:.0f} MiB (at most {most / 2**20:.0f})"
        return None

    def quiet(self) -> bool:
        """Whether a warm worker used (nearly) no CPU since it said Ready: nothing of its
        last meet runs on."""
        if self.group is None or not self.group.accounts_cpu or self.pool.interpreter.instances:
            return True
        return self.group.cpu_seconds() - self._cpu_at_ready < IDLE_CPU

    def _end_meet(self) -> None:
        """Its last meet is over: say what of its log was dropped, and start the counts
        again for the next."""
        if self._dropped_lines:
            log.warning("[%s] %d more log lines from the agent were dropped (at most %d "
                        "lines, %d characters a meet, and %d a second for all the agents of "
                        "one principal)", self._meet_id, self._dropped_lines,
                        LOG_LINES_PER_MEET, LOG_CHARS_PER_MEET, LogBudget.RATE)
        self._logged_lines = self._logged_chars = self._dropped_lines = 0
        self._moved = None

    def _log(self, event: Log) -> None:
        """Write an agent's line to the place's log, within the meet's budget and its
        principal's (see LogBudget)."""
        if (self._logged_lines >= LOG_LINES_PER_MEET
                or self._logged_chars >= LOG_CHARS_PER_MEET):
            self._dropped_lines += 1
            return
        # Control characters are escaped, so an agent cannot forge lines of the log.
        text = event.message[:LOG_LINE].encode("unicode_escape").decode("ascii")
        if len(event.message) > LOG_LINE:
            text = f"{text}... ({len(event.message) - LOG_LINE:,} more)"
        principal = self.meet.principal if self.meet is not None else ""
        if self.pool.logs is not None and not self.pool.logs.take(principal, len(text)):
            self._dropped_lines += 1
            return
        self._logged_lines += 1
        self._logged_chars += len(text)
        log.log(logging.getLevelName(event.level.upper()), "[%s] %s", self._meet_id, text)

    @property
    def _meet_id(self) -> str:
        return self.meet.id if self.meet is not None else ""

    def channel_closed(self, channel: Channel, exc: BaseException | None) -> None:
        reason = channel.close_reason or "channel closed"
        for future in (self._reply, self.clean):
            if future is not None and not future.done():
                future.set_exception(ConnectionLost(reason))
                future.exception()

    def answer(self, event: Result | Failed | Event) -> None:
        """Send the reply to a nested meet, if the worker is still there to get it (a large
        one encoded on a thread; one that cannot be sent is answered with a Failed)."""
        if self.channel is not None:
            self.channel.answer(event)

    async def destroy(self) -> None:
        """Kill everything this worker started and remove its files."""
        if self.destroyed:
            return
        self.destroyed = True
        self._end_meet()
        for task in list(self._tasks):
            task.cancel()
        if self.channel is not None:
            self.channel.close()
        if self.pid and self.exited is not None and not self.exited.done():
            # Only while the zygote has not reported it reaped: after that the pid may be
            # reused. What the agent left behind is then killed through its cgroup.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
        await self.pool.containment.destroy_group(self.group)
        if self.exited is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.exited), 10)
        zygote = self.pool.zygote
        if zygote is not None:  # its exit's CPU time, if run() did not take it
            zygote.cpu_used.pop(self.pid, None)
        if self.on_disk:
            try:
                await asyncio.to_thread(shutil.rmtree, self.workdir, True)
            except RuntimeError:  # at interpreter exit no new threads can start: do it here
                shutil.rmtree(self.workdir, True)
        with contextlib.suppress(OSError):
            self.output.unlink()
        self.pool.containment.release_uid(self.uid)  # its processes are gone: it is free


class WorkerPool:
    """Ready workers for one interpreter; each is used once (or kept warm for its meet's
    principal and program: _warm), replacements start off-path.

    The pool is sized by demand: it keeps `target` workers ready or starting, at least
    --pool-size. A meet that finds none ready (a miss) raises the target by one, up to
    --pool-max, so a burst of meets is soon met by ready workers; after SHRINK_AFTER seconds
    without a miss the target halves back towards --pool-size, and the workers over it are
    destroyed. A meet that finds none ready waits for one already starting, if one is, rather
    than starting another on its own path.
    """

    def __init__(self, interpreter: Interpreter, containment: Containment,
                 plan_extras: Callable[[], Artifacts] | None = None,
                 logs: LogBudget | None = None) -> None:
        self.interpreter = interpreter
        self.logs = logs  # the place's: what each principal's agents may log
        self.containment = containment
        self.settings = containment.settings
        self.plan_extras = plan_extras  # where a compiled language's workers find programs
        self.zygote: ZygoteHandle | None = None
        self._zygote_lock = asyncio.Lock()
        self._ready: collections.deque[Worker] = collections.deque()
        self._waiting: collections.deque[asyncio.Future[Worker | None]] = collections.deque()
        self._starting = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        self._failures = 0
        #: Workers kept ready or starting now (see the class's docstring).
        self.target = self.settings.pool_size
        self._last_miss = 0.0
        self._shrinking: asyncio.TimerHandle | None = None
        #: Meets whose agent ran in one of its workers and ended, since the place started;
        #: of those, how many a warm worker served (one that had served the same program
        #: of the same principal before: see _warm) and how many a fresh one.
        self.ended = 0
        self.warm = 0
        self.fresh = 0
        #: Meets that found no worker ready.
        self.misses = 0

    @property
    def reuses(self) -> bool:
        """Whether its workers may be kept warm (`Containment.reuses`)."""
        return self.containment.reuses

    #: Where its meets run ("workers": processes; "place": threads of the place), and how
    #: many may run at once (0: as many as the place runs meets); whether every program of
    #: a compiled language is built first, even one its workers take as it comes.
    runs_in = "workers"
    at_once = 0
    builds_all = False

    async def hold(self, principal: str, wait: float | None) -> GiveBack | None:
        """Room for one more running meet of `principal` in this pool's workers, and what
        gives it back when the meet's run here ends, given its worker (None: it got none)
        and whether that worker is kept warm (None: nothing to give back); waiting at most
        `wait` seconds for it (None: not at all); PlaceUnavailable or MeetTimeout where
        there is none. Worker processes are bounded by their own cgroups and rlimits:
        always room."""
        return None

    @property
    def ready(self) -> int:
        """Workers ready for a meet now."""
        return sum(1 for worker in self._ready if worker.alive)

    @property
    def size(self) -> int:
        """How many ready workers it keeps now (from --pool-size up to --pool-max)."""
        return self.target

    @property
    def most(self) -> int:
        """The most ready workers it grows to (--pool-max)."""
        return self.settings.pool_max or self.settings.pool_size

    def fill(self) -> None:
        """Start workers in the background until `target` are ready or starting, besides
        one for each meet waiting for a worker."""
        while (not self._closed and self._failures < 3
               and len(self._ready) + self._starting < self.target + len(self._waiting)):
            self._starting += 1
            self._track(self._start_into_pool())

    def _track(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _start_into_pool(self) -> None:
        try:
            worker = await self.start_worker(ahead=True)
        except PlaceUnavailable as exc:
            self._failures += 1
            log.error("%s%s", exc, f":\n{exc.detail}" if exc.detail else "")
            self._hand(None)  # a waiting meet starts its own, and hears why it fails
            return
        except Exception:
            self._failures += 1
            log.exception("cannot start a %s worker", self.interpreter.language)
            self._hand(None)
            return
        finally:
            self._starting -= 1
        self._failures = 0
        if self._closed:
            await worker.destroy()
        elif not self._hand(worker):
            self._ready.append(worker)

    def _hand(self, worker: Worker | None) -> bool:
        """Give `worker` (None: a start failed) to the first meet waiting for one."""
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():  # not given up (cancelled) meanwhile
                waiter.set_result(worker)
                return True
        return False

    async def take(self) -> Worker:
        """A ready worker; else one already starting, or else a freshly started one."""
        self._failures = 0
        while self._ready:
            worker = self._ready.popleft()
            if worker.alive:
                if not self._ready:
                    self._grow()  # the last one: the next meet would find none
                    self.fill()
                return worker
            self._track(worker.destroy())
        self.misses += 1
        self._grow()
        self.fill()
        if self._starting > len(self._waiting):  # one is on its way that no meet awaits
            waiter: asyncio.Future[Worker | None] = asyncio.get_running_loop().create_future()
            self._waiting.append(waiter)
            try:
                given = await waiter
            except asyncio.CancelledError:
                # A worker handed over as the meet was cancelled: to the next, or the pool.
                handed = waiter.result() if waiter.done() and not waiter.cancelled() else None
                if handed is not None and not self._hand(handed):
                    self._ready.append(handed)
                raise
            if given is not None and given.alive:
                return given
            if given is not None:
                self._track(given.destroy())
        return await self.start_worker()

    def _grow(self) -> None:
        """No worker (or only one) was ready for a meet: keep more ready, up to the most."""
        self._last_miss = time.monotonic()
        if self.target < self.most:
            self.target += 1
            self._schedule_shrink()

    def _schedule_shrink(self) -> None:
        if self._shrinking is None and not self._closed:
            self._shrinking = asyncio.get_running_loop().call_later(SHRINK_AFTER, self._shrink)

    def _shrink(self) -> None:
        """Halve the target towards --pool-size once SHRINK_AFTER passed without a miss,
        destroying the ready workers over it."""
        self._shrinking = None
        if self._closed or self.target <= self.settings.pool_size:
            return
        quiet = time.monotonic() - self._last_miss
        if quiet >= SHRINK_AFTER:
            self.target = max(self.settings.pool_size, self.target // 2)
            while len(self._ready) + self._starting > self.target and self._ready:
                self._track(self._ready.pop().destroy())
        if self.target > self.settings.pool_size:
            wait = SHRINK_AFTER - quiet if quiet < SHRINK_AFTER else SHRINK_AFTER
            self._shrinking = asyncio.get_running_loop().call_later(wait, self._shrink)

    def release(self, worker: Worker, kept: bool = False) -> None:
        """Count a used worker's meet as ended; unless it was `kept` warm (_warm), destroy
        it; and start a replacement where the pool lacks one, after the meet has its
        answer (a worker kept warm waits for its own program's meets, not the pool's).

        Both happen here rather than in `take` so that the replacement's fork and set-up do
        not compete with the meet it replaces.
        """
        self.ended += 1
        if worker.warm:
            self.warm += 1
        else:
            self.fresh += 1
        if not kept:
            self._track(worker.destroy())
        self.fill()

    async def _live_zygote(self) -> ZygoteHandle:
        async with self._zygote_lock:
            if self._closed:
                raise PlaceUnavailable("the place is shutting down")
            if self.zygote is None or not self.zygote.alive:
                zygote = ZygoteHandle(self.interpreter, self.settings.work_dir,
                                      self.containment.zygote_plan())
                await zygote.start()
                self.zygote = zygote
            return self.zygote

    async def start_worker(self, ahead: bool = False) -> Worker:
        """Fork a worker from the zygote, confined and connected, ready for one meet.

        `ahead`: for the pool, before any meet waits for it (it may then warm itself up:
        `_channel.serve_one`)."""
        try:
            return await self._start_worker(ahead)
        except OSError as exc:
            raise PlaceUnavailable(f"cannot start a {self.interpreter.language} worker: "
                                   f"{exc.strerror or exc}") from exc

    async def _start_worker(self, ahead: bool) -> Worker:
        settings = self.settings
        containment = self.containment
        zygote = await self._live_zygote()
        prefix = f"{self.interpreter.language}-"
        on_disk = not containment.private_workdirs
        # Where the worker mounts a tmpfs of its own on the work directory, its directory
        # is made there (`_mounts.enter_scratch`) and goes with it: the place makes
        # nothing on disk for it, nor removes anything after. The name is only reserved,
        # by the output file beside it (made O_EXCL below).
        workdir = (Path(tempfile.mkdtemp(prefix=prefix, dir=settings.work_dir)) if on_disk
                   else settings.work_dir / f"{prefix}{secrets.token_hex(8)}")
        output = workdir.with_name(workdir.name + ".out")
        worker = Worker(self, workdir, output, on_disk)
        ours = theirs = None
        try:
            worker.uid = uid = containment.new_uid()
            if uid is not None and on_disk:
                os.chown(workdir, uid, uid)
            worker.group = containment.new_group()
            ours, theirs = socket.socketpair()
            artifacts = self.plan_extras() if self.plan_extras is not None else None
            plan = containment.plan(workdir, uid, worker.group, artifacts=artifacts, ahead=ahead)
            with private_output(output, readable=True) as out:  # its own output, to read
                worker.pid, worker.exited = await zygote.spawn(plan, [theirs.fileno(),
                                                                       out.fileno()])
            theirs.close()
            await self._connect(worker, ours, "worker")
        except BaseException:
            for sock in (theirs, ours):
                if sock is not None:
                    sock.close()
            await asyncio.shield(worker.destroy())
            raise
        return worker

    async def _connect(self, worker: Worker, ours: socket.socket, what: str) -> None:
        """Make `worker`'s channel on the place's end of its socketpair, and wait for its
        Hello (PlaceUnavailable, with its output, if it ends or stays silent first)."""
        assert worker.exited is not None
        loop = asyncio.get_running_loop()
        _, worker.channel = await loop.create_unix_connection(
            lambda: Channel(Role.HOST, worker, self.settings.max_frame), sock=ours)
        waits: set[asyncio.Future[Any]] = {worker.channel.ready, worker.exited}
        await asyncio.wait(waits, timeout=START_TIMEOUT, return_when=asyncio.FIRST_COMPLETED)
        if not worker.channel.ready.done() or worker.channel.ready.exception():
            raise PlaceUnavailable(f"a {self.interpreter.language} {what} did not start",
                                   worker.output_tail())

    async def close(self) -> None:
        self._closed = True
        if self._shrinking is not None:
            self._shrinking.cancel()
        for task in list(self._tasks):
            if not task.done():
                await asyncio.wait({task}, timeout=START_TIMEOUT)
        ready, self._ready = list(self._ready), collections.deque()
        await asyncio.gather(*(w.destroy() for w in ready), return_exceptions=True)
        if self.zygote is not None:
            await self.zygote.close()
