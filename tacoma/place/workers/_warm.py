"""Warm workers: a worker reused for later meets of one principal's one program (or, for a
language whose every meet is a fresh instance of its runtime, of any of its programs).

Forking and confining a worker costs a few milliseconds of CPU, most of it the kernel's
(copy-on-write faults, exit, fork): with a fresh process per meet, two cores serve a few
hundred isolated meets a second. AWS Lambda's answer is to reuse an execution environment
for later invocations of the same function by the same tenant, and never across them; so
does a place. A worker that served a meet well (a Result, no limit hit, its agent did not
move on) is kept here under its key, the meet's

    (language, principal, program hash)

and only a meet with the same key takes it again. Whatever a meet leaves in the process's
memory is then seen only by the same program run by the same principal, which could have
kept it anyway (in a cabinet, in its briefcase): no new flow between principals or
programs. Told with its meet that it is to be kept (Keep), the worker makes itself clean
after it (`agent._reuse`: its other processes killed, its files emptied, descriptors,
environment and working directory reset) and says Ready (and sets its next meet's CPU
time limit); the place counts CPU time per meet from the worker's cgroup, and the
worker's output file starts anew with each meet.

Idle warm workers are bounded, so they never starve fresh ones: at most `warm_max` in all,
and half of them for any one principal (and so for any one of its programs: a smaller share
per program made one busy program miss its own workers, with 32 meets in flight); past a
bound the worker idle longest is destroyed to make room (programs run once do not keep a
busy program's workers out). One idle for IDLE_SECONDS is destroyed, and so is one that
has served `warm_meets` meets or lived `warm_seconds`. Only a program met twice or more
lately gets its worker kept: the first meet of a program, and a program met once, never
do. A place with `--reuse never`, a meet whose briefcase has a FRESH folder, and a place
that cannot give each worker a PID namespace, a tmpfs and cgroups of its own (not root)
always run a fresh worker.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from dataclasses import dataclass

from ...agent._interpreter import Interpreter
from ...wire._program import code_digest
from .._settings import PlaceSettings
from ._pool import Worker

__all__ = ["IDLE_SECONDS", "WarmKey", "WarmWorkers"]

log = logging.getLogger("tacoma.place")

#: Seconds an idle warm worker is kept before it is destroyed.
IDLE_SECONDS = 5.0
#: Seconds a meet waits for a warm worker still making itself clean, rather than a fresh one.
CLEAN_WAIT = 0.5
#: Keys remembered, the most recent: a worker is kept warm only for a key met twice or more
#: lately, so that programs run once (a new one each meet) cost no more than with
#: `--reuse never` (measured: 150-190 fresh meets a second where that gets 210).
SEEN = 4096


@dataclass(frozen=True, slots=True)
class WarmKey:
    """Which meets may share a worker: one language, one principal, one program (b"" for
    a language whose meets are fresh instances: any program of the principal)."""

    language: str
    principal: str
    program: bytes  # the program's hash, as passports and CODE_HASH name it; or b""

    @classmethod
    def of(cls, interpreter: Interpreter, principal: str, code: list[bytes]) -> WarmKey:
        """The key of a meet of `interpreter`'s language for `principal` with CODE folder
        `code`: without the program where each meet is a fresh instance of its runtime
        (`Interpreter.instances`), since the instance, not the process, then keeps one
        meet from the next."""
        return cls(interpreter.language, principal,
                   b"" if interpreter.instances else code_digest(code))


class WarmWorkers:
    """The place's idle warm workers, by key (see the module)."""

    def __init__(self, settings: PlaceSettings) -> None:
        self.settings = settings
        self.most = settings.warm_max
        self.per_principal = max(1, self.most // 2)
        self._idle: dict[WarmKey, list[Worker]] = {}
        #: How many meets of each key lately wanted a worker (at most SEEN keys).
        self._seen: collections.OrderedDict[WarmKey, int] = collections.OrderedDict()
        self._principals: collections.Counter[str] = collections.Counter()
        self._count = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._sweeping: asyncio.TimerHandle | None = None
        self._closed = False

    @property
    def idle(self) -> int:
        """Warm workers waiting for a meet of their key now."""
        return self._count

    def idle_of(self, language: str) -> int:
        return sum(len(workers) for key, workers in self._idle.items()
                   if key.language == language)

    async def take(self, key: WarmKey) -> Worker | None:
        """A warm worker of `key`, clean and alive; None if there is none."""
        self._seen[key] = self._seen.pop(key, 0) + 1  # the newest last
        if len(self._seen) > SEEN:
            self._seen.popitem(last=False)
        workers = self._idle.get(key)
        while workers:
            ready = [w for w in workers if w.clean is not None and w.clean.done()]
            worker = ready[-1] if ready else workers[-1]  # the one used last: its caches
            self._remove(key, worker)
            if not worker.clean_now():
                try:
                    await asyncio.wait_for(asyncio.shield(worker.until_clean()), CLEAN_WAIT)
                except (TimeoutError, Exception):  # noqa: BLE001 - it failed to come clean
                    self._destroy(worker)
                    continue
            if worker.alive and worker.clean_now() and worker.quiet():
                return worker
            self._destroy(worker)
            workers = self._idle.get(key)
        return None

    def wants(self, key: WarmKey) -> bool:
        """Whether a worker of `key` is to be kept after its meet (told so with it): only
        for a program met twice or more lately, not for one met once."""
        return self._seen.get(key, 0) >= 2

    def offer(self, key: WarmKey, worker: Worker) -> bool:
        """Keep `worker`, whose meet of `key` just ended well, for the next meet of `key`;
        False if it may not be kept (its caller then destroys it)."""
        settings = self.settings
        if not worker.told_keep:
            return False  # a program met once, so far: its worker was not told to stay
        if (self._closed or not worker.alive or worker.served >= settings.warm_meets
                or time.monotonic() - worker.born >= settings.warm_seconds
                or worker.killed_for_memory()):
            return False
        if self._principals[key.principal] >= self.per_principal:
            self._evict(key.principal)
        if self._count >= self.most:
            self._evict(None)
        worker.idle_since = time.monotonic()
        self._idle.setdefault(key, []).append(worker)
        self._principals[key.principal] += 1
        self._count += 1
        if worker.clean is not None:
            worker.clean.add_done_callback(lambda _: self._check(key, worker))
        self._schedule_sweep()
        return True

    def _evict(self, principal: str | None) -> None:
        """Destroy the worker idle longest (of `principal`, if given): a bound reached
        makes room for the worker used last, so that programs run once do not keep a busy
        program's workers out."""
        oldest = min(((w.idle_since, id(w), key, w) for key, workers in self._idle.items()
                      if principal is None or key.principal == principal
                      for w in workers), default=None)
        if oldest is not None and self._remove(oldest[2], oldest[3]):
            self._destroy(oldest[3])

    def _check(self, key: WarmKey, worker: Worker) -> None:
        """Its Ready came, or its channel closed: one that will not be clean goes."""
        if not worker.clean_now() and self._remove(key, worker):
            self._destroy(worker)

    def _remove(self, key: WarmKey, worker: Worker) -> bool:
        workers = self._idle.get(key)
        if workers is None or worker not in workers:
            return False
        workers.remove(worker)
        if not workers:
            del self._idle[key]
        self._principals[key.principal] -= 1
        if not self._principals[key.principal]:
            del self._principals[key.principal]
        self._count -= 1
        return True

    def _destroy(self, worker: Worker) -> None:
        task = asyncio.ensure_future(worker.destroy())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _schedule_sweep(self) -> None:
        if self._sweeping is None and not self._closed:
            self._sweeping = asyncio.get_running_loop().call_later(IDLE_SECONDS, self._sweep)

    def _sweep(self) -> None:
        """Destroy the workers idle for IDLE_SECONDS or more."""
        self._sweeping = None
        now = time.monotonic()
        for key, workers in list(self._idle.items()):
            for worker in list(workers):
                if now - worker.idle_since >= IDLE_SECONDS and self._remove(key, worker):
                    self._destroy(worker)
        if self._count:
            self._schedule_sweep()

    async def close(self) -> None:
        self._closed = True
        if self._sweeping is not None:
            self._sweeping.cancel()
        workers = [w for ws in self._idle.values() for w in ws]
        self._idle.clear()
        self._principals.clear()
        self._count = 0
        await asyncio.gather(*(w.destroy() for w in workers), return_exceptions=True)
        for task in list(self._tasks):
            with contextlib.suppress(Exception):
                await task
