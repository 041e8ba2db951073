"""Workers that are threads of the place: instances run in the place's own process.

A language whose every meet is a fresh instance of its runtime (`Interpreter.instances`,
WebAssembly) can run those instances without a process of their own: a place started with
--instances-in-place gives such a language a `ThreadPool`, whose workers are threads of the
place. Each speaks the worker protocol over a real socketpair, as a worker process does
(`agent._channel.serve_thread`), so the router, warm workers, nested meets, `go`, residents,
`tacoma ps` and `tacoma kill` reach it through the same `Worker` as any other.

What that trades away is the operating system's part of the sandbox: no uid, namespace,
Landlock, seccomp or cgroup stands between the runtime and the place; the runtime's own
memory safety and the runner's limits (CPU time by the thread's own clock, memory by the
store's limits, output bounded, no file system or network) are the only wall, and the
instances share the place's memory. `tacoma doctor` and the docs say so.

Why threads and not the event loop: a meet's instance runs for as long as its agent
computes, with the GIL released, and its agent API calls block (a nested meet waits for
its answer): the loop must not wait for it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...agent._channel import serve_thread
from ...agent._interpreter import InPlaceRunner
from ...agent._plan import Rlimits, SandboxPlan
from ...wire._errors import MeetTimeout, PlaceUnavailable
from ...wire._protocol import Result
from .._settings import PlaceSettings
from ._containment import private_output
from ._pool import GiveBack, HandedMeet, Moved, NestedHandler, Worker, WorkerPool

__all__ = ["ThreadPool", "ThreadWorker"]

log = logging.getLogger("tacoma.place")

class ThreadWorker(Worker):
    """A thread of the place that runs one principal's meets in fresh instances."""

    def __init__(self, pool: WorkerPool, workdir: Path, output: Path) -> None:
        super().__init__(pool, workdir, output, on_disk=False)
        # Its pid stays 0: Worker.destroy kills a process group only where there is a pid.
        self.runner: InPlaceRunner | None = None
        self.thread: threading.Thread | None = None
        self._cpu_from = 0.0

    def _thread_cpu(self) -> float:
        thread = self.thread
        if thread is None or thread.ident is None or not thread.is_alive():
            return self._cpu_from
        try:
            return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
        except OSError:  # ended meanwhile
            return self._cpu_from

    async def run(self, meet: HandedMeet, timeout: float, nested: NestedHandler,
                  keep: bool = False) -> Result | Moved:
        self._cpu_from = self._thread_cpu()
        return await super().run(meet, timeout, nested, keep)

    def usage(self) -> tuple[int, float, int]:
        """(processes, CPU seconds, resident bytes): no process of its own, the CPU time
        its thread used in this meet, and no memory it can be told from the place's."""
        return 0, max(0.0, self._thread_cpu() - self._cpu_from), 0

    async def destroy(self) -> None:
        """Stop the meet it runs, if any, close its channel, and wait for its thread."""
        if not self.destroyed and self.runner is not None:
            self.runner.stop()
        exited = self.exited
        await super().destroy()  # closes the channel: a waiting thread ends
        if exited is not None and not exited.done():
            # A runtime call that cannot be stopped (compiling a large module) ends by itself.
            log.warning("a thread that ran %s instances did not end when stopped; it ends "
                        "when its runtime's call returns", self.pool.interpreter.language)


class Slots:
    """How many meets may run instances in the place's process at once: `most` in all, and
    any one principal `share` of them (so that one principal's meets cannot hold them all).

    A meet from outside (a client, another place) that finds none waits for one, first come
    first served, within its own time; an agent's own meet here is refused at once instead
    (PlaceUnavailable), since its caller holds a slot and, waiting, could wait for itself."""

    def __init__(self, most: int, share: int) -> None:
        self.most = most
        self.share = share
        self.running = 0
        self.by_principal: collections.Counter[str] = collections.Counter()
        self._waiting: collections.deque[tuple[str, asyncio.Future[None]]] = \
            collections.deque()

    def _free_for(self, principal: str) -> bool:
        return self.running < self.most and self.by_principal[principal] < self.share

    def _hold(self, principal: str) -> None:
        self.running += 1
        self.by_principal[principal] += 1

    def _give(self, principal: str) -> None:
        self.running -= 1
        self.by_principal[principal] -= 1
        if not self.by_principal[principal]:
            del self.by_principal[principal]
        for entry in list(self._waiting):  # the first waiters that may run now, in order
            waiter_of, waiter = entry
            if waiter.done():
                self._waiting.remove(entry)
            elif self._free_for(waiter_of):
                self._waiting.remove(entry)
                self._hold(waiter_of)
                waiter.set_result(None)

    def _refusal(self, principal: str, what: str) -> PlaceUnavailable:
        if self.running >= self.most:
            return PlaceUnavailable(f"the place runs its most of {self.most} {what} at once "
                                    "(--instances-memory, each charged its --memory); try "
                                    "again when some end")
        return PlaceUnavailable(f"{principal or 'anonymous'} has its share of {self.share} "
                                f"{what} running at once; try again when some end")

    async def take(self, principal: str, what: str, wait: float | None) -> Callable[[], None]:
        """A slot for a meet of `principal`, and what gives it back (once): at once, or
        after waiting at most `wait` seconds (None: no wait); PlaceUnavailable, saying which
        bound, where there is none (MeetTimeout after a wait)."""
        if not self._free_for(principal):
            if wait is None:
                raise self._refusal(principal, what)
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiting.append((principal, waiter))
            try:
                await asyncio.wait_for(asyncio.shield(waiter), wait)
            except (TimeoutError, asyncio.CancelledError) as exc:
                if waiter.done() and not waiter.cancelled():  # given just now: give it on
                    self._give(principal)
                else:
                    waiter.cancel()
                if isinstance(exc, TimeoutError):
                    raise MeetTimeout(f"the meet's time ran out waiting for room: "
                                      f"{self._refusal(principal, what)}") from None
                raise
        else:
            self._hold(principal)
        given = False

        def give_back() -> None:
            nonlocal given
            if not given:
                given = True
                self._give(principal)

        return give_back


def instances_memory(settings: PlaceSettings) -> int:
    """The memory the place lets its in-process instances hold together: --instances-memory,
    or half of the host's."""
    if settings.instances_memory is not None:
        return settings.instances_memory
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2


class ThreadPool(WorkerPool):
    """A pool of `ThreadWorker`s, for a language that runs its instances in the place's
    own process (--instances-in-place). Its meets' instances share the place's memory: at
    most `slots.most` run at once (see Slots, and instances_memory)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        settings = self.settings
        most = max(1, instances_memory(settings) // settings.limits.memory_bytes)
        self.slots = Slots(most, max(1, int(most * settings.share)))
        self.at_once = most

    runs_in = "place"
    #: Every program is built, in a confined process, before a thread runs it: what
    #: compiling it takes (memory, time) is bounded there by the agent's limits, not
    #: spent first in the place's own process.
    builds_all = True

    async def hold(self, principal: str, wait: float | None) -> GiveBack | None:
        """As WorkerPool's; the room is held until the meet's thread is idle again (kept
        warm) or has ended: a thread the place gave up on may still be in a runtime call
        that cannot be stopped (compiling a module), and counts until it returns."""
        release = await self.slots.take(principal, f"{self.interpreter.language} instances "
                                                   "in its own process", wait)

        def give_back(worker: Worker | None, kept: bool) -> None:
            exited = worker.exited if worker is not None else None
            if kept or exited is None or exited.done():
                release()
            else:
                exited.add_done_callback(lambda _: release())

        return give_back

    @property
    def reuses(self) -> bool:
        """Whether its workers are kept warm: as the place's --reuse says, and where meets
        have principals. A thread has no process to make clean: its meets' instances went
        with them, and it keeps nothing of theirs but compiled modules, which it keeps by
        principal (`Interpreter.in_place`)."""
        settings = self.settings
        return settings.reuse != "never" and not settings.insecure

    async def _start_worker(self, ahead: bool) -> Worker:
        interpreter = self.interpreter
        assert interpreter.in_place is not None
        settings = self.settings
        limits = settings.limits
        name = f"{interpreter.language}-{secrets.token_hex(8)}"
        workdir = settings.work_dir / name  # a name only: the thread has no directory
        worker = ThreadWorker(self, workdir, workdir.with_name(name + ".out"))
        ours, theirs_end = socket.socketpair()
        theirs: socket.socket | None = theirs_end
        loop = asyncio.get_running_loop()
        exited: asyncio.Future[int] = loop.create_future()
        worker.exited = exited
        try:
            with private_output(worker.output, readable=True) as out:
                output = os.dup(out.fileno())  # the thread's, until it ends
            try:
                worker.runner = runner = interpreter.in_place(
                    output, limits.file_bytes, limits.memory_bytes)
            except BaseException:
                os.close(output)
                raise
            artifacts = self.plan_extras() if self.plan_extras is not None else None
            plan = SandboxPlan(
                workdir=str(workdir), env={}, cgroups=(), nproc=None, userns=False, uid=None,
                seccomp=None, limits=Rlimits(cpu_seconds=limits.cpu_seconds,
                                             memory_bytes=limits.memory_bytes,
                                             file_bytes=limits.file_bytes,
                                             open_files=limits.open_files),
                place=self.containment.place_address, max_frame=settings.max_frame,
                prefetch=settings.prefetch, artifacts=artifacts, ahead=ahead,
                reuse=self.reuses, fd=theirs_end.fileno())
            worker.thread = threading.Thread(
                target=_serve, args=(runner, plan, theirs_end, output, loop, exited),
                name=f"tacoma-{name}", daemon=True)
            theirs = None  # the thread's now: it closes it
            worker.thread.start()
            await self._connect(worker, ours, "thread")
        except BaseException:
            for sock in (theirs, ours):
                if sock is not None:
                    sock.close()
            if worker.thread is None:
                exited.set_result(1)
            await asyncio.shield(worker.destroy())
            raise
        return worker


def _serve(runner: InPlaceRunner, plan: SandboxPlan, sock: socket.socket, output: int,
           loop: asyncio.AbstractEventLoop, exited: asyncio.Future[int]) -> None:
    """A worker thread's life: its meets, then its runner given back and its descriptors
    closed, and the place told (exit status 0, or 1 on a runner's bug, logged)."""
    status = 0
    try:
        serve_thread(runner.run, plan)
    except BaseException:  # a runner's bug ends the thread, not the place
        status = 1
        log.exception("a thread that ran instances failed")
    finally:
        runner.close()
        sock.close()
        os.close(output)
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
            loop.call_soon_threadsafe(_set, exited, status)


def _set(future: asyncio.Future[int], status: int) -> None:
    if not future.done():
        future.set_result(status)
