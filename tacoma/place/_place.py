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
so are ag_cabinet, the door to the place's cabinets (see _cabinets), ag_home, where trips
end (see _trips), ag_admin, for `tacoma ps` and `tacoma kill` with the place's admin token,
and, for agents only, ag_mailbox (see _residents). A meet with a resident agent's name is a
message to it (see _residents); a meet in the `go` mode is a moving agent arriving (_trips).

Every meet runs in a task of its own; a meet's failure, however it happens, becomes a Failed
reply on its own request id and touches nothing else. A broken connection loses only its own
meets (whose agents are killed: nobody is left to receive their result).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import secrets
import shutil
import sqlite3
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from .._version import __version__
from ..agent._interpreter import Interpreter, discover_interpreters, module_file
from ..client._client import ClientCache, PlaceClient
from ..client._transport import Channel
from ..wire._address import parse_address, split_target
from ..wire._briefcase import CODE, TRACE, Briefcase
from ..wire._errors import (
    AgentKilled,
    LimitExceeded,
    MeetError,
    MeetTimeout,
    MessageError,
    NotAllowed,
    PlaceUnavailable,
    ProtocolError,
    TacomaError,
    UnknownAgent,
    error_from_wire,
    kind_of,
)
from ..wire._names import (
    ADMIN_AGENT,
    BUILT_IN,
    CABINET_AGENT,
    HOME_AGENT,
    MAILBOX_AGENT,
)
from ..wire._program import program_bytes
from ..wire._protocol import Accepted, Cancel, Event, Failed, Meet, Result, Role
from ..wire._trace import read as _read_trace
from ..wire._trace import record
from ._builds import Builds
from ._cabinets import Cabinets
from ._residents import Residents
from ._settings import PlaceSettings
from ._trips import Trip, Trips, ending
from ._workers import AgentUids, PidsCgroups, Worker, WorkerPool

__all__ = ["Place"]

log = logging.getLogger("tacoma.place")

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
                task.cancel()  # _serve answers it, and its agent is killed
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
        self.residents = Residents(self.settings.mailbox_messages, self.settings.mailbox_bytes,
                                   self.settings.mailbox_total_bytes, self._has_agent)
        self.trips = Trips("")
        self.workers: dict[str, Worker] = {}  # by meet id, while their agents run
        self.killed: set[str] = set()  # meet ids stopped by `tacoma kill`
        self.admin_token = ""
        self._server: asyncio.AbstractServer | None = None
        self._ids = itertools.count(1)
        self._boot = f"{int(time.time()) & 0xFFFFFF:06x}"
        self._clients = ClientCache()  # connections to other places, for agents' meets
        self._background: set[asyncio.Task[None]] = set()
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
                          (settings.cache_dir, enterable), (settings.agents_dir, 0o700),
                          (settings.data_dir, 0o755)):
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
        self._write_admin_token()
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
        self.trips = Trips(self.address)
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

    def _write_admin_token(self) -> None:
        """A new admin token for this run, in a file only the place's user can read."""
        self.admin_token = secrets.token_hex(32)
        path = self.settings.admin_token_file
        temporary = path.with_suffix(".tmp")
        temporary.unlink(missing_ok=True)
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(self.admin_token + "\n")
        os.replace(temporary, path)

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
        self.residents.close()  # residents waiting in receive get none, and can end
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
        if self._background:  # trips' ends on their way home
            await asyncio.wait(list(self._background), timeout=5)
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
        return [*BUILT_IN, *sorted(self.pools), *installed]

    def _installed_files(self) -> list[Path]:
        suffixes = {s for i in self.interpreters.values() for s in i.suffixes}
        try:
            return [p for p in self.settings.agents_dir.iterdir()
                    if p.suffix in suffixes and p.is_file()]
        except OSError:
            return []

    def _has_agent(self, name: str) -> bool:
        """Whether the place has an agent called `name` (built in, a language, installed)."""
        try:
            self.resolve(name)
        except UnknownAgent:
            return False
        except MeetError:  # a language that cannot run here: the name is still taken
            return True
        return True

    def resolve(self, agent: str) -> tuple[WorkerPool | None, bytes | None]:
        """The pool that runs `agent` and, for an installed agent, its program."""
        if agent in BUILT_IN:
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
        residents = ", ".join(sorted(self.residents.by_name)) or "none"
        raise UnknownAgent(f"no agent {agent!r} at place {self.address}",
                           "agents here: " + ", ".join(self.agent_names())
                           + "; resident agents: " + residents)

    # ------------------------------------------------------------------ meets
    def _admit(self, agent: str = "") -> None:
        """Raise PlaceUnavailable unless one more meet may start now (from anyone).

        The place's own agents (BUILT_IN) take no worker and are always served while the
        place runs: a trip's end must reach its home (ag_home), and the administrator
        must reach a busy place (ag_admin).
        """
        if self._stopping:
            raise PlaceUnavailable(f"place {self.address} is shutting down")
        if self._meets >= self.settings.max_meets and agent not in BUILT_IN:
            raise PlaceUnavailable(f"place {self.address} is running its maximum of "
                                   f"{self.settings.max_meets} meets; try again later")

    def accept(self, channel: Channel, meet: Meet, tasks: dict[int, asyncio.Task[None]]) -> None:
        """Start serving a meet from a client connection."""
        accepted = time.perf_counter_ns() if TRACE in meet.briefcase else 0
        if meet.mode != "go" and self.residents.get(meet.agent) is not None:
            self._accept_message(channel, meet, tasks)
            return
        try:
            self._admit(meet.agent if meet.mode == "sync" else "")
            if meet.mode == "ack":
                raise MessageError(f"the ack mode is for messages to resident agents, and "
                                   f"{meet.agent} is not one here")
            trip = Trip.take(meet.briefcase) if meet.mode == "go" else None
            if meet.mode != "sync":  # answered before it runs: refuse it now if it cannot
                self.resolve(meet.agent)
        except MeetError as exc:
            self._reply(channel, _failed(meet.rid, exc))
            return
        meet_id = self._new_meet_id()
        if trip is not None:
            self._reply(channel, Accepted(meet.rid, meet_id))
            self._spawn_meet(meet_id, self._run_hop(meet.agent, meet.briefcase, meet.timeout,
                                                    meet_id, trip))
        elif meet.mode == "async":
            self._reply(channel, Accepted(meet.rid, meet_id))
            self._spawn_meet(meet_id, self._run_async(meet, meet_id))
        else:
            trace = None
            if TRACE in meet.briefcase:  # a traced meet (see _trace)
                trace = [("_accepted", accepted)]
            task = self._spawn_meet(meet_id, self._serve(
                channel, meet.rid, self.run_meet(meet.agent, meet.briefcase, meet.timeout,
                                                 meet_id, trace=trace), meet_id))
            tasks[meet.rid] = task
            task.add_done_callback(lambda _: tasks.pop(meet.rid, None))

    def _accept_message(self, channel: Channel, meet: Meet,
                        tasks: dict[int, asyncio.Task[None]]) -> None:
        """A client's meet with a resident agent: a message to it (see _residents)."""
        try:
            message = self.residents.deliver(meet.agent, meet.mode, meet.briefcase, "client")
        except MeetError as exc:
            self._reply(channel, _failed(meet.rid, exc))
            return
        if message.answer is None:  # one-way: in the mailbox is all the sender hears
            self._reply(channel, Accepted(meet.rid, message.id))
            return
        task = asyncio.ensure_future(self._serve(
            channel, meet.rid, self._answer(meet, message.answer), ""))
        tasks[meet.rid] = task
        task.add_done_callback(lambda _: tasks.pop(meet.rid, None))

    async def _answer(self, meet: Meet, answer: asyncio.Future[Briefcase]) -> Briefcase:
        """The resident's answer to a message: its reply (sync) or that it took it (ack)."""
        limit = self.settings.limits.meet_seconds
        timeout = limit if meet.timeout is None else min(meet.timeout, limit)
        try:
            async with asyncio.timeout(timeout):
                return await answer
        except TimeoutError:
            if answer.done() and not answer.cancelled():
                raise
            what = "take the message" if meet.mode == "ack" else "reply"
            raise MeetTimeout(f"{meet.agent} did not {what} within {timeout:g} s") from None

    async def _message(self, name: str, meet: Meet, sender: str) -> Briefcase | str:
        """Deliver an agent's message to resident `name` here: the message id (one-way), or
        the resident's answer."""
        message = self.residents.deliver(name, meet.mode, meet.briefcase, sender)
        if message.answer is None:
            return message.id
        return await self._answer(meet, message.answer)

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
                self.killed.discard(meet_id)

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

    def _cancelled(self, meet_id: str) -> MeetError:
        """Why a meet's task was cancelled, as the error its caller gets."""
        if meet_id in self.killed:
            return AgentKilled(f"killed by tacoma kill at place {self.address}")
        if self._stopping:
            return PlaceUnavailable(f"place {self.address} stopped during the meet")
        return MeetError("meet cancelled")

    async def _serve(self, channel: Channel, rid: int,
                     work: Coroutine[Any, Any, Briefcase], meet_id: str) -> None:
        """Answer a client's sync meet (or message) `rid` with what `work` returns."""
        try:
            result = await work
        except asyncio.CancelledError:
            # The client cancelled, or left, or the place stops: answer if anyone listens.
            self._reply(channel, _failed(rid, self._cancelled(meet_id)))
            raise
        except Exception as exc:  # noqa: BLE001 - every meet gets an answer, whatever failed
            self._reply(channel, _failed(rid, exc))
            return
        self._reply(channel, Result(rid, result))

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

    async def _run_hop(self, agent: str, briefcase: Briefcase, timeout: float | None,
                       meet_id: str, trip: Trip) -> None:
        """Run one hop of a trip; where the agent ends, send the trip's end home."""
        try:
            result = await self.run_meet(agent, briefcase, timeout, meet_id, trip=trip)
        except _Moved:
            return  # it went on: the next place has the trip now
        except asyncio.CancelledError:
            end = ending(trip, None, self._cancelled(meet_id), self.address)
            self._in_background(self._send_home(trip, end))
            raise
        except Exception as exc:  # noqa: BLE001 - whatever ended the trip, home hears it
            failure = _failed(0, exc)
            end = ending(trip, None, error_from_wire(failure.kind, failure.message,
                                                     failure.detail), self.address)
        else:
            end = ending(trip, result, None, self.address)
        await self._send_home(trip, end)

    async def _send_home(self, trip: Trip, end: Briefcase) -> None:
        try:
            if trip.home == self.address:
                self.trips.end(end)
                return
            client = await self._client(trip.home)
            await asyncio.wait_for(client.meet(HOME_AGENT, end, "sync", 30.0), 30.0)
        except Exception as exc:  # noqa: BLE001 - nobody else to tell; the home times out
            log.warning("trip %s ended here but cannot reach its home %s: %s", trip.id,
                        trip.home, exc)

    def _in_background(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

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
                       meet_id: str, who: str | None = None, trip: Trip | None = None,
                       trace: list[tuple[str, int]] | None = None) -> Briefcase:
        """Run one meet at this place and return the agent's briefcase.

        `who` is the identity of the agent at this place that made the meet (None for a
        client): it decides which cabinets the meet may reach. `trip` is the trip this meet
        is a hop of, for a moving agent that arrived here. If the agent moves on, a meet
        that began here returns the briefcase its trip ends with; a hop raises _Moved.
        `trace`, for a traced meet, collects the place's steps (see _trace).
        """
        clock = time.perf_counter_ns
        if trace is not None:
            mark = clock()
            trace.append(("examine", mark - trace[0][1]))
        pool, installed_code = self.resolve(agent)
        if trace is not None:
            now = clock()
            trace.append(("find agent", now - mark))
            mark = now
        if pool is None:
            result = await self._built_in(agent, briefcase, who)
            if trace is not None:
                self._end_trace(result, trace)
            return result
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
        if trace is not None:
            trace.append(("take worker", clock() - mark))
            briefcase[TRACE] = []  # the worker's signal to time its own steps
        worker.installed_as = agent if installed_code is not None else None
        worker.program = program_bytes(briefcase)
        worker.trip = trip
        worker.started, worker.deadline = time.time(), time.monotonic() + timeout
        self.workers[meet_id] = worker
        try:
            try:
                result = (await worker.run(Meet(1, agent, briefcase), timeout, meet_id,
                                           self._nested_meet, trace)).briefcase
            except Exception:
                if worker.went is None:
                    raise
            finally:
                del self.workers[meet_id]
                self.residents.leave(worker)
                pool.release(worker)
            if worker.went is not None:  # the agent moved on: its trip goes on without us
                if trip is not None:
                    raise _Moved
                assert worker.trip is not None
                result = await self.trips.wait(worker.trip, worker.deadline)
        finally:
            if trip is None and worker.trip is not None:  # a trip that began here is over
                self.trips.waiting.pop(worker.trip.id, None)
        if installed_code is not None:  # the caller gets back its own CODE, not ours
            if callers_code is None:
                result.remove(CODE)
            else:
                result[CODE] = callers_code
        if trace is not None:
            self._end_trace(result, trace)
        return result

    @staticmethod
    def _end_trace(result: Briefcase, trace: list[tuple[str, int]]) -> None:
        """Put the place's steps of a traced meet into its result, with the worker's
        return (its wait, less the steps the worker timed itself)."""
        accepted = trace[0][1]
        waited = sum(ns for step, ns in trace if step == "_waited")
        if waited:
            inside = sum(ns for side, _, ns in _read_trace(result, take=False)
                         if side == "worker")
            record(result, "worker", [("return", max(0, waited - inside))])
        steps = [(step, ns) for step, ns in trace if not step.startswith("_")]
        record(result, "place", [*steps, ("span", time.perf_counter_ns() - accepted)])

    async def _built_in(self, agent: str, briefcase: Briefcase, who: str | None) -> Briefcase:
        """Answer a meet of one of the agents the place is itself (BUILT_IN)."""
        if agent == CABINET_AGENT:
            return await self.cabinets.serve(briefcase, who)
        if agent == HOME_AGENT:
            if not self.trips.end(briefcase):
                log.info("a trip ended that nobody here waits for any more")
            return Briefcase()
        if agent == ADMIN_AGENT:
            return self._admin(briefcase)
        return briefcase  # ag_echo

    # ------------------------------------------------------------------ agents' requests
    async def _nested_meet(self, worker: Worker, meet: Meet) -> None:
        """An agent meets another agent (at this place, or at another through a client),
        sends a message (a meet with a resident), uses its mailbox, or moves on."""
        try:
            if worker.went is not None:
                raise MeetError(f"the agent has gone to {worker.went}")
            if meet.mode == "go":
                await self._go(worker, meet)
                return
            agent, address = split_target(meet.agent)
            if address is not None and address != self.address:
                client = await self._client(address)
                answer = await client.meet(agent, meet.briefcase, meet.mode, meet.timeout)
            elif agent == MAILBOX_AGENT:
                answer = await self.residents.serve(worker, meet.briefcase)
            elif self.residents.get(agent) is not None:
                sender = (f"{worker.resident}@{self.address}" if worker.resident
                          else worker.identity)
                answer = await self._message(agent, meet, sender)
            elif meet.mode == "ack":
                raise MessageError(f"the ack mode is for messages to resident agents, and "
                                   f"{agent} is not one here")
            elif agent in BUILT_IN and meet.mode == "sync":
                # The place's own services (cabinets, ...) run no agent: an admitted agent
                # may use them even while the place is at --max-meets.
                answer = await self._built_in(agent, meet.briefcase, worker.identity)
            else:
                # An agent's meets count against --max-meets like anyone's, and can be killed.
                self._admit()
                meet_id = self._new_meet_id()
                if meet.mode == "async":
                    self.resolve(agent)  # answered before it runs: refuse it now if it cannot
                    self._spawn_meet(meet_id, self._run_async(
                        Meet(meet.rid, agent, meet.briefcase, "async", meet.timeout), meet_id,
                        worker.identity))
                    answer = meet_id
                else:
                    task = self._spawn_meet(meet_id, self._serve_worker(
                        worker, meet.rid, agent, meet, meet_id))
                    try:
                        await asyncio.shield(task)
                    except asyncio.CancelledError:
                        task.cancel()
                        raise
                    return
            worker.answer(Accepted(meet.rid, answer) if isinstance(answer, str)
                          else Result(meet.rid, answer))
        except Exception as exc:  # noqa: BLE001 - the agent is waiting for an answer
            worker.answer(_failed(meet.rid, exc))

    async def _serve_worker(self, worker: Worker, rid: int, agent: str, meet: Meet,
                            meet_id: str) -> None:
        """An agent's sync meet at this place, as a meet of its own (so it can be killed)."""
        try:
            result = await self.run_meet(agent, meet.briefcase, meet.timeout, meet_id,
                                         worker.identity)
        except asyncio.CancelledError:
            worker.answer(_failed(rid, self._cancelled(meet_id)))
            raise
        except Exception as exc:  # noqa: BLE001 - the agent is waiting for an answer
            worker.answer(_failed(rid, exc))
            return
        worker.answer(Result(rid, result))

    async def _go(self, worker: Worker, meet: Meet) -> None:
        """Hand a moving agent on to the place `meet.agent` (see _trips).

        Answered Accepted once the next place has taken the agent; any failure (the place
        is down, refuses, cannot run the language) reaches the agent, which is still here.
        """
        if worker.going:
            raise MeetError("the agent is already going to another place")
        target = meet.agent
        agent = worker.pool.interpreter.agent
        trip = worker.trip or self.trips.start()
        worker.going = True
        try:
            if target == self.address:
                self._admit()
                meet_id = self._new_meet_id()
                self._spawn_meet(meet_id, self._run_hop(agent, Briefcase(meet.briefcase),
                                                        self._time_left(worker), meet_id, trip))
            else:
                client = await self._client(target)
                meet_id = str(await client.meet(agent, trip.stamp(meet.briefcase), "go",
                                                self._time_left(worker)))
        except BaseException:
            worker.going = False
            if worker.trip is None:  # the trip did not start after all
                self.trips.waiting.pop(trip.id, None)
            raise
        worker.trip = trip
        worker.answer(Accepted(meet.rid, meet_id))
        worker.moved_on(target)

    @staticmethod
    def _time_left(worker: Worker) -> float:
        remaining = worker.deadline - time.monotonic()
        if remaining <= 0:
            raise MeetTimeout("no time is left of the meet for the agent to go on")
        return remaining

    # ------------------------------------------------------------------ administration
    def _admin(self, request: Briefcase) -> Briefcase:
        """ag_admin: `ps` and `kill`, for whoever shows the place's admin token."""
        token = request.text("TOKEN")[0] if request.folder("TOKEN") else ""
        if not secrets.compare_digest(token.encode(), self.admin_token.encode()):
            raise NotAllowed(f"{ADMIN_AGENT} needs the admin token of place {self.address}; "
                             "tacoma ps and tacoma kill read it from the place's state "
                             "directory (--state-dir, or --token-file)")
        op = request.text("OP")[0] if request.folder("OP") else ""
        if op == "ps":
            return Briefcase(AGENTS=[json.dumps(row).encode() for row in self.ps()])
        if op == "kill":
            names = request.text("NAME") if request.folder("NAME") else []
            return Briefcase(KILLED=[self.kill(names[0] if names else "")])
        raise MeetError(f"unknown {ADMIN_AGENT} operation {op!r}: ps or kill")

    def ps(self) -> list[dict[str, Any]]:
        """The agents running here now: one row each, residents named."""
        now = time.time()
        rows = []
        for meet_id, worker in list(self.workers.items()):
            processes, cpu, rss = worker.usage()
            rows.append({
                "meet": meet_id, "name": worker.resident or "",
                "agent": worker.installed_as or worker.pool.interpreter.agent,
                "language": worker.pool.interpreter.language, "pid": worker.pid,
                "processes": processes, "age": round(now - worker.started, 3),
                "cpu": round(cpu, 3), "rss": rss,
                "mailbox": (len(r.queue) if (r := self.residents.of(worker)) else None),
            })
        return rows

    def kill(self, name: str) -> str:
        """Stop the agent that is resident as `name`, or runs meet `name`; its meet id."""
        resident = self.residents.get(name)
        meet_id = resident.meet_id if resident is not None else name
        task = self.running.get(meet_id)
        if task is None or meet_id not in self.workers:
            raise UnknownAgent(f"no agent {name!r} is running at place {self.address}",
                               "tacoma ps lists them")
        self.killed.add(meet_id)
        task.cancel()
        return meet_id

    async def _client(self, address: str) -> PlaceClient:
        return await self._clients.get(address, timeout=10.0)


class _Moved(Exception):
    """Raised by run_meet for a hop whose agent moved on to another place."""


def _failed(rid: int, exc: BaseException) -> Failed:
    """The Failed reply for an exception raised while serving a meet."""
    if isinstance(exc, MeetError):
        return Failed(rid, exc.kind, exc.message, exc.detail)
    if isinstance(exc, TacomaError | ValueError):  # ValueError: a bad target from an agent
        return Failed(rid, kind_of(exc), str(exc))
    log.error("meet failed on an unexpected error", exc_info=exc)
    return Failed(rid, PlaceUnavailable.kind,
                  f"the place could not serve this meet: {type(exc).__name__}: {exc}")

