"""The place: one daemon per host that accepts meets, checks them, and starts agents.

The meet path at a place, against TACOMA's 13 steps (Table 1 of the paper):
    receive and examine (5)   a Channel decodes the frame; the protocol core checks it
    locate agent (6)          `resolve`: ag_echo, an interpreter's agent, or an installed one
    pipes, fork, exec (7, 8)  off the critical path: a pre-started worker is taken from the pool
    deliver briefcase (9)     one write on the worker's socketpair
    unmarshal, start (10)     in the worker, which is already running its interpreter
    return status (11, 12)    the worker's Result frame is re-sent to the client as is
    terminate (13)            the connection stays open for the next meet; the used worker is
                              destroyed in the background
ag_echo, the null agent, is answered by the place itself: it runs no code of anyone's;
so is ag_cabinet, the door to the place's cabinets (see _cabinets).

Every meet runs in a task of its own; a meet's failure, however it happens, becomes a Failed
reply on its own request id and touches nothing else. A broken connection loses only its own
meets (whose agents are killed: nobody is left to receive their result).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import shutil
import sqlite3
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from ._agentside import program_bytes
from ._briefcase import CODE, Briefcase
from ._builds import Builds
from ._cabinets import CABINET_AGENT, Cabinets
from ._client import ClientCache, PlaceClient, split_target
from ._errors import (
    LimitExceeded,
    MeetError,
    MeetTimeout,
    PlaceUnavailable,
    ProtocolError,
    TacomaError,
    UnknownAgent,
    kind_of,
)
from ._interpreter import Interpreter, discover_interpreters, module_file
from ._protocol import Accepted, Cancel, Event, Failed, Meet, Result, Role
from ._settings import PlaceSettings
from ._transport import Channel, parse_address
from ._version import __version__
from ._workers import AgentUids, PidsCgroups, Worker, WorkerPool

__all__ = ["ECHO_AGENT", "Place"]

log = logging.getLogger("tacoma.place")

#: The null agent: returns the briefcase it got. For benchmarks and health checks.
ECHO_AGENT = "ag_echo"
_SOFTWARE = f"tacoma-place/{__version__}"


class _Session:
    """A client connection to the place and the meets it has in flight."""

    def __init__(self, place: Place) -> None:
        self.place = place
        self.channel: Channel
        self.tasks: dict[int, asyncio.Task[None]] = {}

    def event_received(self, channel: Channel, event: Event) -> None:
        if isinstance(event, Cancel):
            task = self.tasks.get(event.rid)
            if task is not None:
                task.cancel()  # _serve_sync answers it, and its agent is killed
            return
        assert isinstance(event, Meet)  # the only other event a client may send
        self.place.accept(channel, event, self.tasks)

    def channel_closed(self, channel: Channel, exc: BaseException | None) -> None:
        self.place.sessions.discard(self)
        for task in self.tasks.values():
            task.cancel()  # sync meets nobody waits for any more: kill their agents


class Place:
    """A place: `await start()`, then meets are served until `await stop()`."""

    def __init__(self, settings: PlaceSettings | None = None) -> None:
        self.settings = settings or PlaceSettings()
        self.interpreters: dict[str, Interpreter] = {}
        self.pools: dict[str, WorkerPool] = {}
        self.sessions: set[_Session] = set()
        self.running: dict[str, asyncio.Task[None]] = {}
        self.address = ""
        self.cgroups: PidsCgroups | None = None
        self.uids: AgentUids | None = None
        self.builds = Builds(self.settings, 0o700)
        self.cabinets = Cabinets(self.settings.state_dir / "cabinets.sqlite3")
        self._server: asyncio.AbstractServer | None = None
        self._ids = itertools.count(1)
        self._boot = f"{int(time.time()) & 0xFFFFFF:06x}"
        self._clients = ClientCache()  # connections to other places, for agents' meets
        self._meets = 0
        self._stopping = False
        self._stopped = asyncio.Event()

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> str:
        """Listen, start the worker pools, and return the address meets are accepted on."""
        settings = self.settings
        host, port = parse_address(settings.listen, listen=True)
        self.interpreters = discover_interpreters()
        self.cgroups = PidsCgroups.available()
        separate = settings.separate_uids and os.geteuid() == 0
        # Agents under their own uids must reach their working directory by its path:
        # the state and work directories are then enterable (0711) but not listable.
        enterable = 0o711 if separate else 0o700
        for sub, mode in ((settings.state_dir, enterable), (settings.work_dir, enterable),
                          (settings.cache_dir, enterable), (settings.agents_dir, 0o700)):
            sub.mkdir(parents=True, exist_ok=True, mode=mode)
            sub.chmod(mode)
        for leftover in settings.work_dir.iterdir():  # from a place that was killed
            if leftover.is_dir():
                shutil.rmtree(leftover, ignore_errors=True)
            else:
                leftover.unlink(missing_ok=True)
        if separate:
            modules = ["tacoma", "msgpack", *(i.worker_module for i in self.interpreters.values())]
            self.uids = AgentUids(settings, [
                os.path.dirname(p) for m in modules if (p := module_file(m))])
        elif os.geteuid() == 0:
            log.warning("agents run as root (separate_uids is off): they can signal the "
                        "place and read whatever root may")
        self.builds = Builds(settings, enterable)
        try:
            await self.cabinets.open()
        except sqlite3.Error as exc:
            raise PlaceUnavailable(f"cannot open the cabinets in {self.cabinets.path}: {exc}") \
                from exc
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: self._new_channel(), host, port, reuse_address=True, backlog=1024)
        sock = self._server.sockets[0].getsockname()
        self.address = f"[{sock[0]}]:{sock[1]}" if ":" in sock[0] else f"{sock[0]}:{sock[1]}"
        for agent, interpreter in self.interpreters.items():
            problem = interpreter.check()
            if problem is not None:
                log.warning("%s cannot run here: %s", agent, problem)
                continue
            pool = WorkerPool(interpreter, settings, self.cgroups, self.uids, self.address,
                              self.builds)
            if interpreter.build is not None:
                self.builds.prune(interpreter, leftovers=True)
            self.pools[agent] = pool
            pool.fill()
        log.info("place %s listening, state in %s, agents: %s", self.address,
                 settings.state_dir, ", ".join(self.agent_names()))
        return self.address

    def _new_channel(self) -> Channel:
        session = _Session(self)
        refuse = ""
        if len(self.sessions) >= self.settings.max_connections:
            refuse = (f"place {self.address} has its maximum of "
                      f"{self.settings.max_connections} connections; try again later")
        else:
            self.sessions.add(session)
        session.channel = Channel(Role.PLACE, session, self.settings.max_frame, _SOFTWARE,
                                  refuse)
        return session.channel

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    async def stop(self, grace: float | None = None) -> None:
        """Stop accepting, let running meets finish within `grace` seconds, kill the rest."""
        if self._stopping:
            await self._stopped.wait()
            return
        self._stopping = True
        grace = self.settings.grace_seconds if grace is None else grace
        if self._server is not None:
            self._server.close()
        running = [t for t in self.running.values() if not t.done()]
        if running:
            log.info("waiting up to %g s for %d running meets", grace, len(running))
            _, late = await asyncio.wait(running, timeout=grace)
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late, timeout=10)
        for session in list(self.sessions):
            session.channel.close(f"place {self.address} is shutting down")
        await self.builds.close()
        await self.cabinets.close()
        await asyncio.gather(*(pool.close() for pool in self.pools.values()),
                             return_exceptions=True)
        self._clients.close()
        for session in list(self.sessions):  # peers that did not take their last replies
            session.channel.abort()
        if self.cgroups is not None:
            self.cgroups.close()
        log.info("place %s stopped", self.address)
        self._stopped.set()

    # ------------------------------------------------------------------ agents
    def agent_names(self) -> list[str]:
        """Every agent this place can meet now: built-in, interpreters, installed."""
        installed = sorted(p.stem for p in self._installed_files())
        return [ECHO_AGENT, CABINET_AGENT, *sorted(self.pools), *installed]

    def _installed_files(self) -> list[Path]:
        suffixes = {s for i in self.interpreters.values() for s in i.suffixes}
        try:
            return [p for p in self.settings.agents_dir.iterdir()
                    if p.suffix in suffixes and p.is_file()]
        except OSError:
            return []

    def resolve(self, agent: str) -> tuple[WorkerPool | None, bytes | None]:
        """The pool that runs `agent` and, for an installed agent, its program."""
        if agent in (ECHO_AGENT, CABINET_AGENT):
            return None, None
        pool = self.pools.get(agent)
        if pool is not None:
            return pool, None
        if "/" not in agent and not agent.startswith("."):
            for interpreter in self.interpreters.values():
                for suffix in interpreter.suffixes:
                    path = self.settings.agents_dir / f"{agent}{suffix}"
                    try:
                        if path.is_file() and interpreter.agent in self.pools:
                            return self.pools[interpreter.agent], path.read_bytes()
                    except OSError:  # a name too long for a file, say: not installed
                        continue
        if agent in self.interpreters:
            reason = self.interpreters[agent].check() or "its worker pool is not running"
            raise PlaceUnavailable(f"agent {agent} cannot run at this place: {reason}")
        raise UnknownAgent(f"no agent {agent!r} at place {self.address}",
                           "agents here: " + ", ".join(self.agent_names()))

    # ------------------------------------------------------------------ meets
    def _admit(self) -> None:
        """Raise PlaceUnavailable unless one more meet may start now (from anyone)."""
        if self._stopping:
            raise PlaceUnavailable(f"place {self.address} is shutting down")
        if self._meets >= self.settings.max_meets:
            raise PlaceUnavailable(f"place {self.address} is running its maximum of "
                                   f"{self.settings.max_meets} meets; try again later")

    def accept(self, channel: Channel, meet: Meet, tasks: dict[int, asyncio.Task[None]]) -> None:
        """Start serving a meet from a client connection."""
        try:
            self._admit()
        except PlaceUnavailable as exc:
            self._reply(channel, _failed(meet.rid, exc))
            return
        meet_id = self._new_meet_id()
        if meet.mode == "async":
            self._reply(channel, Accepted(meet.rid, meet_id))
            self._spawn_meet(meet_id, self._run_async(meet, meet_id))
        else:
            task = self._spawn_meet(meet_id, self._serve_sync(channel, meet, meet_id))
            tasks[meet.rid] = task
            task.add_done_callback(lambda _: tasks.pop(meet.rid, None))

    def _new_meet_id(self) -> str:
        return f"{self._boot}-{next(self._ids)}"

    def _spawn_meet(self, meet_id: str, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Run a meet as a task, counted in `_meets` exactly while it runs.

        The count drops in the coroutine's own `finally`, not in a done callback (which runs
        a loop iteration later, so meets arriving meanwhile would be refused as over
        --max-meets); the callback only covers a task cancelled before it started.
        """
        self._meets += 1
        counted = True

        def uncount() -> None:
            nonlocal counted
            if counted:
                counted = False
                self._meets -= 1
                self.running.pop(meet_id, None)

        async def tracked() -> None:
            try:
                await coro
            finally:
                uncount()

        task = asyncio.ensure_future(tracked())
        self.running[meet_id] = task
        def cancelled_early(_: object) -> None:
            uncount()
            coro.close()

        task.add_done_callback(cancelled_early)
        return task

    async def _serve_sync(self, channel: Channel, meet: Meet, meet_id: str) -> None:
        try:
            result = await self.run_meet(meet.agent, meet.briefcase, meet.timeout, meet_id)
        except asyncio.CancelledError:
            # The client cancelled, or left, or the place stops: answer if anyone listens.
            self._reply(channel, Failed(meet.rid, MeetError.kind, "meet cancelled"))
            raise
        except Exception as exc:  # noqa: BLE001 - every meet gets an answer, whatever failed
            self._reply(channel, _failed(meet.rid, exc))
            return
        self._reply(channel, Result(meet.rid, result))

    async def _run_async(self, meet: Meet, meet_id: str, who: str | None = None) -> None:
        try:
            await self.run_meet(meet.agent, meet.briefcase, meet.timeout, meet_id, who)
        except TacomaError as exc:
            log.info("async meet %s (%s) failed: %s", meet_id, meet.agent, exc)
        except Exception:
            log.exception("async meet %s (%s) failed on an unexpected error", meet_id,
                          meet.agent)
        else:
            log.info("async meet %s (%s) done", meet_id, meet.agent)

    def _reply(self, channel: Channel, event: Result | Failed | Accepted) -> None:
        if channel.is_closing:
            return
        try:
            channel.send(event)
        except (LimitExceeded, ProtocolError) as exc:
            if isinstance(event, Result):
                channel.send(Failed(event.rid, kind_of(exc),
                                    f"the result briefcase cannot be sent: {exc}"))
            else:
                log.error("cannot send %s: %s", type(event).__name__, exc)

    async def run_meet(self, agent: str, briefcase: Briefcase, timeout: float | None,
                       meet_id: str, who: str | None = None) -> Briefcase:
        """Run one meet at this place and return the agent's briefcase.

        `who` is the identity of the agent at this place that made the meet (None for a
        client): it decides which cabinets the meet may reach.
        """
        pool, installed_code = self.resolve(agent)
        if pool is None:
            if agent == CABINET_AGENT:
                return await self.cabinets.serve(briefcase, who)
            return briefcase  # ag_echo
        limit = self.settings.limits.meet_seconds
        timeout = limit if timeout is None else min(timeout, limit)
        callers_code = briefcase.get(CODE)
        if installed_code is not None:
            briefcase[CODE] = [installed_code]
        elif not briefcase.get(CODE):
            raise MeetError(f"{agent} needs its program in the CODE folder "
                            f"(tacoma meet {agent} --code FILE)")
        if pool.interpreter.build is not None:
            started = time.monotonic()
            await self.builds.ensure(pool, program_bytes(briefcase), timeout)
            timeout -= time.monotonic() - started
            if timeout <= 0:
                raise MeetTimeout(f"compiling {agent}'s program took the meet's whole time")
        worker = await pool.take()
        worker.installed_as = agent if installed_code is not None else None
        worker.program = program_bytes(briefcase)
        try:
            result = await worker.run(Meet(1, agent, briefcase), timeout, meet_id,
                                      self._nested_meet)
        finally:
            pool.release(worker)
        if installed_code is not None:  # the caller gets back its own CODE, not ours
            if callers_code is None:
                result.briefcase.remove(CODE)
            else:
                result.briefcase[CODE] = callers_code
        return result.briefcase

    async def _nested_meet(self, worker: Worker, meet: Meet) -> None:
        """An agent meets another agent: at this place, or at another through a client."""
        try:
            agent, address = split_target(meet.agent)
            if address is None or address == self.address:
                self._admit()  # an agent's meets count against --max-meets like anyone's
                if meet.mode == "async":
                    meet_id = self._new_meet_id()
                    self._spawn_meet(meet_id, self._run_async(
                        Meet(meet.rid, agent, meet.briefcase, "async", meet.timeout), meet_id,
                        worker.identity))
                    worker.answer(Accepted(meet.rid, meet_id))
                    return
                meet_id = self._new_meet_id()
                self._meets += 1
                try:
                    result = await self.run_meet(agent, meet.briefcase, meet.timeout, meet_id,
                                                 worker.identity)
                finally:
                    self._meets -= 1
                worker.answer(Result(meet.rid, result))
                return
            client = await self._client(address)
            answer = await client.meet(agent, meet.briefcase, meet.mode, meet.timeout)
            if isinstance(answer, str):
                worker.answer(Accepted(meet.rid, answer))
            else:
                worker.answer(Result(meet.rid, answer))
        except Exception as exc:  # noqa: BLE001 - the agent is waiting for an answer
            worker.answer(_failed(meet.rid, exc))

    async def _client(self, address: str) -> PlaceClient:
        return await self._clients.get(address, timeout=10.0)


def _failed(rid: int, exc: BaseException) -> Failed:
    """The Failed reply for an exception raised while serving a meet."""
    if isinstance(exc, MeetError):
        return Failed(rid, exc.kind, exc.message, exc.detail)
    if isinstance(exc, TacomaError | ValueError):  # ValueError: a bad target from an agent
        return Failed(rid, kind_of(exc), str(exc))
    log.error("meet failed on an unexpected error", exc_info=exc)
    return Failed(rid, PlaceUnavailable.kind,
                  f"the place could not serve this meet: {type(exc).__name__}: {exc}")

