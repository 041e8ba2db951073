"""The place: one daemon per host that accepts meets, checks them, and starts agents.

`Place` is the lifecycle only: it makes the state directories, discovers the interpreters,
sets up containment (uids, cgroups), opens the cabinets, listens, starts a worker pool per
language, and on `stop` lets running meets finish within the grace period and takes all of
that down again. The work is done by its parts, each in its own module and each given only
the collaborators it needs:

    taking/     a client's connection (`_sessions`: its I/O only), the one router that
                takes every meet, a client's or an agent's (`_router`), running an agent
                in a worker (`_pooled`), and the agents the place is itself
                (`_builtins`: ag_echo, ag_cabinet, ag_home, ag_admin, ag_status; ag_trip
                is the router's: it serves rear guards)
    meets/      a meet's record and the book of them (`_meet`), the router's tables and
                the meet's states (`_route`), trips as data (`_trips`), who may meet what
                (`_access`), residents' mailboxes (`_residents`)
    promises/   what outlives a crash or a lost link: the journal (`_journal`, SQLite),
                async meets and recorded outcomes (`_async`), the place's side of trips
                (`_hops`: hand-overs, rear guards, recovery)
    workers/    which agents the place has (`_agents`), pre-started worker processes
                (`_pool`, forked by `_zygotes`), each started with the sandbox plan
                (`agent._plan.SandboxPlan`) that `_containment` builds from `_layers`,
                `_uids`, `_cgroups` and `_seccomp`; compiled programs (`_builds`), trusted
                agents (`_trusted`)
    stores/     the state directory (`_statedir`), cabinets, lazy folders, programs by hash

Each sub-package's header says what it owns and what it may import.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import secrets
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import cast

from .._version import __version__
from ..agent._interpreter import Interpreter, discover_interpreters, module_file
from ..client._client import ClientCache
from ..transport import Channel, ReceiveBudget
from ..wire._address import parse_address
from ..wire._errors import PlaceUnavailable, TacomaError
from ..wire._names import BUILT_IN
from ..wire._protocol import Role
from ._settings import PlaceSettings
from .meets._access import Access
from .meets._meet import Meets
from .meets._residents import Residents
from .meets._trips import Trips
from .promises._journal import Journal
from .stores._cabinets import Cabinets
from .stores._codes import CodeStore
from .stores._lazy import LazyStore
from .stores._statedir import Disk, StateDir, disk_full
from .taking._builtins import BuiltIns
from .taking._router import Router
from .taking._sessions import Session
from .workers._agents import Agents
from .workers._builds import Builds
from .workers._cgroups import Cgroups
from .workers._containment import Containment
from .workers._layers import probe
from .workers._pool import LogBudget, WorkerPool
from .workers._threads import ThreadPool
from .workers._uids import AgentUids
from .workers._warm import WarmWorkers

__all__ = ["Place"]

log = logging.getLogger("tacoma.place")

_SOFTWARE = f"tacoma-place/{__version__}"


class Place:
    """A place: `await start()`, then meets are served until `await stop()`."""

    def __init__(self, settings: PlaceSettings | None = None) -> None:
        self.settings = settings or PlaceSettings()
        self.address = ""
        self.sessions: set[Session] = set()
        self.cabinets = Cabinets(self.settings.state_dir / "cabinets.sqlite3", self.settings)
        self.journal = Journal(self.settings.state_dir / "journal.sqlite3",
                               self.settings.keep_results)
        self.cgroups: Cgroups | None = None
        self.uids: AgentUids | None = None
        #: Bytes of incomplete frames held for all connections together, and per identity.
        settings = self.settings
        self.receiving = ReceiveBudget(settings.max_receiving, max(
            settings.max_frame, int(settings.max_receiving * settings.share)))
        self.router: Router | None = None  # its parts, once it listens
        self.codes: CodeStore | None = None
        self.lazy: LazyStore | None = None
        self.access: Access | None = None  # its trust, once it starts
        self._server: asyncio.AbstractServer | None = None
        self._recheck: asyncio.TimerHandle | None = None
        self._stopping = False
        self._stopped = asyncio.Event()
        self.state = StateDir(self.settings.state_dir)
        self.disk: Disk | None = None  # its state directory's file system, once claimed

    async def start(self) -> str:
        """Listen, start the worker pools, and return the address meets are accepted on.

        A place that cannot start (its state directory held by another place, its port
        taken) raises, and leaves its state directory unlocked for the next try.
        """
        try:
            return await self._start()
        except BaseException:
            self.state.release()
            raise

    async def _start(self) -> str:
        settings = self.settings
        host, port = parse_address(settings.listen, listen=True)
        # Trust first: a place that cannot authenticate does not start, and touches nothing.
        self.access = Access(settings, host)
        interpreters = discover_interpreters()
        layers = probe(settings.separate_uids, settings.agent_network)
        self.cgroups = layers.cgroups
        separate = layers.uids
        # Agents under their own uids must reach their working directory by its path:
        # the state and work directories are then enterable (0711) but not listable.
        enterable = 0o711 if separate else 0o700
        # Held from here until the place stops: nothing in the directory is touched before,
        # and a place refused here says nothing of the layers it will never apply.
        self.state.claim(enterable)
        self.disk = Disk(settings.state_dir)
        self.journal.bound(settings.journal_bytes if settings.journal_bytes is not None
                           else max(1 << 20, min(1 << 30, self.disk.size // 4)),
                           settings.share if not settings.insecure else 1.0, self.disk)
        self.cabinets.bound(self.disk)
        applied = [layer.name for layer in layers.report if layer.applied]
        missing = [f"{layer.name} ({layer.detail})" for layer in layers.report
                   if not layer.applied]
        log.info("sandbox layers applied to every agent: %s", ", ".join(applied) or "none")
        if missing:
            log.warning("sandbox layers NOT applied here: %s (tacoma doctor says more)",
                        "; ".join(missing))
        if self.disk.free() < self.disk.reserve:
            log.warning("the disk of the state directory %s is full (%s bytes free, less than "
                        "the %s it keeps free): sync meets are served; async meets, results "
                        "and cabinet writes are refused until there is room",
                        settings.state_dir, f"{self.disk.free():,}", f"{self.disk.reserve:,}")
        for sub, mode in ((settings.work_dir, enterable),
                          (settings.cache_dir, enterable), (settings.agents_dir, 0o700),
                          (settings.trusted_dir, 0o700), (settings.data_dir, 0o755)):
            try:
                sub.mkdir(parents=True, exist_ok=True, mode=mode)
            except OSError as exc:
                raise PlaceUnavailable(f"cannot make {sub}: {exc.strerror or exc}") from None
            sub.chmod(mode)
        for leftover in settings.work_dir.iterdir():  # from a place that was killed
            if leftover.is_dir():
                shutil.rmtree(leftover, ignore_errors=True)
            else:
                leftover.unlink(missing_ok=True)
        if separate:
            self.uids = AgentUids()
        elif os.geteuid() == 0:
            log.warning("agents run as root (separate_uids is off): they can read whatever "
                        "root may")
        modules = ["tacoma", "msgpack", *(i.worker_module for i in interpreters.values())]
        module_paths = [os.path.dirname(p) for m in modules if (p := module_file(m))]
        admin_token = write_admin_token(settings.admin_token_file)
        try:
            await self.cabinets.open()
        except (sqlite3.Error, TacomaError) as exc:
            if not self._disk_is_full(exc):
                raise PlaceUnavailable(f"cannot open the cabinets in {self.cabinets.path}: "
                                       f"{exc}") from exc
            log.warning("the cabinets cannot be opened while the disk is full (%s): ag_cabinet "
                        "meets fail until there is room", exc)
        # Bound but not yet serving: the parts below are made knowing the address, and
        # only then does the place accept a connection.
        self._server = await asyncio.get_running_loop().create_server(
            self._new_channel, host, port, reuse_address=True, backlog=1024,
            start_serving=False)
        sock = self._server.sockets[0].getsockname()
        self.address = address = (f"[{sock[0]}]:{sock[1]}" if ":" in sock[0]
                                  else f"{sock[0]}:{sock[1]}")
        containment = Containment(settings, layers, self.uids, address, module_paths,
                                  self.access.secrets)
        self.router = self._parts(interpreters, containment, enterable, admin_token)
        try:
            await self.router.resume()
        except (sqlite3.Error, TacomaError) as exc:
            if not self._disk_is_full(exc):
                raise PlaceUnavailable(f"cannot open the journal {self.journal.path}: "
                                       f"{exc}") from exc
            # What it holds waits for a start with room: nothing of it is lost.
            log.warning("the journal cannot be opened while the disk is full (%s): async "
                        "meets are refused, and the meets it holds run again when the place "
                        "starts again with room", exc)
        await self._server.start_serving()
        self.state.announce(address)
        self._recheck_revoked()
        tls = (f"mutual TLS as {self.access.name}" if self.access.tls is not None
               else "PLAINTEXT (--insecure)")
        log.info("place %s listening (%s), state in %s, agents: %s", address, tls,
                 settings.state_dir, ", ".join(self.agent_names()))
        return address

    def _parts(self, interpreters: dict[str, Interpreter], containment: Containment,
               cache_mode: int, admin_token: str) -> Router:
        """The place's parts, each given what it needs, and a filling pool per language."""
        settings, address = self.settings, containment.place_address
        residents: Residents
        agents = Agents(settings.agents_dir, interpreters, address,
                        lambda: list(residents.by_name), settings.trusted_dir,
                        settings.max_frame, WarmWorkers(settings))
        share = settings.share if not settings.insecure else 1.0
        residents = Residents(settings.mailbox_messages, settings.mailbox_bytes,
                              settings.mailbox_total_bytes, agents.has, share)
        meets = Meets(settings.max_meets, address, share, settings.max_queued)
        trips = Trips(address)
        assert self.access is not None
        self.access.passports.here(address)
        # Connections to other places, for agents' meets, moves and lazy folders' data,
        # made as this place's identity.
        clients = ClientCache(self.access.credentials, self.access.vet_place)
        # Programs named by hash, and lazy folders: served by the built-ins, and filled in
        # or relayed by the sessions whose clients send them.
        self.codes = CodeStore()
        self.lazy = LazyStore(address, settings, clients, self.access.seals)
        builtins = BuiltIns(self.cabinets, trips, meets, residents, admin_token, self.journal,
                            settings.limits.meet_seconds, agents=agents,
                            layers=containment.layers.report, settings=settings,
                            codes=self.codes, lazy=self.lazy,
                            passports=self.access.passports)
        builds = Builds(containment, cache_mode, self.disk)
        logs = LogBudget()  # one for all languages: a principal's agents log within it
        for agent, interpreter in interpreters.items():
            problem = interpreter.check()
            if problem is not None:
                log.warning("%s cannot run here: %s", agent, problem)
                continue
            extras = None
            if interpreter.build is not None:
                builds.prune(interpreter, leftovers=True)
                extras = functools.partial(builds.worker_plan, interpreter)
            in_place = settings.instances_in_place and interpreter.in_place is not None
            if in_place:
                log.warning("%s agents run in the place's own process (--instances-in-place): "
                            "their runtime is the only wall between them and the place",
                            agent)
            kind = ThreadPool if in_place else WorkerPool
            agents.pools[agent] = pool = kind(interpreter, containment, extras, logs)
            pool.fill()
        return Router(settings, agents, meets, builtins, builds, residents, trips,
                      self.access, self.journal, clients)

    def _disk_is_full(self, exc: BaseException) -> bool:
        """Whether `exc` (or what caused it) says the state directory's disk is full."""
        causes = [exc, exc.__cause__]
        full = any(c is not None and disk_full(c) for c in causes)
        return full or (self.disk is not None and self.disk.free() < self.disk.reserve)

    def agent_names(self) -> list[str]:
        """Every agent this place can meet now: built-in, interpreters, installed."""
        return self.router.agents.names() if self.router is not None else list(BUILT_IN)

    def _new_channel(self) -> asyncio.BaseProtocol:
        """A new connection: a Session on a Channel, inside TLS unless --insecure.

        Connections still in their TLS handshake count against --max-connections (and the
        handshake is bounded in time), so peers that stall in it cannot hold the place's
        slots: at most half of them, and a quarter of a principal's share from one host,
        the oldest dropped for the newest past that (see ServerTLS).
        """
        # The server serves only once the parts are made.
        assert self.router is not None
        assert self.access is not None
        tls = self.access.tls
        assert self.codes is not None
        assert self.lazy is not None
        session = Session(self.router, self.sessions, self.access, self.codes, self.lazy,
                          self.settings.idle_seconds)
        refuse = ""
        handshaking = tls.handshaking if tls else 0
        if tls is not None and handshaking >= 2 * tls.most:
            # Past the handshakes' bound the oldest are dropped (see ServerTLS); these are
            # the dropped ones not yet gone, and a new one would only wait behind them.
            self.access.refusals.log("a peer", f"{handshaking} TLS handshakes are under way "
                                               "or being dropped; closed at once")
            return _Closed()
        # Handshakes past their bound are dropped oldest first for this one (ServerTLS): at
        # most `most` of them are left, this one among them.
        pending = min(handshaking, tls.most - 1) if tls is not None else 0
        if len(self.sessions) + pending >= self.settings.max_connections:
            refuse = (f"place {self.address} has its maximum of "
                      f"{self.settings.max_connections} connections; try again later")
        if tls is None:
            session.channel = Channel(Role.PLACE, session, self.settings.max_frame,
                                      _SOFTWARE, refuse, admit=session.admit,
                                      budget=self.receiving,
                                      hello_timeout=self.settings.hello_seconds)
            return session.channel
        handshake: list[Callable[[], None]] = []

        def admit(channel: Channel) -> str:
            handshake[0]()  # a handshaking connection no more, as it becomes a session
            return session.admit(channel)

        session.channel = Channel(Role.PLACE, session, self.settings.max_frame, _SOFTWARE,
                                  refuse, admit=admit, budget=self.receiving,
                                  hello_timeout=self.settings.hello_seconds)
        protocol, finished = tls.wrap(session.channel)
        handshake.append(finished)
        return protocol

    def _recheck_revoked(self) -> None:
        """Every few seconds: reread the deny list if it changed, and drop the connections
        of identities it now names (and this place's own connections to revoked places)."""
        assert self.access is not None
        if self.access.tls is None or self._stopping:
            return
        try:
            for session in list(self.sessions):
                peer = session.channel.identity
                if peer is not None and self.access.revoked(peer):
                    log.warning("closing the connection of %s from %s: its certificate is "
                                "now revoked", peer.name, session.channel.peer)
                    session.channel.close(f"not authorized: identity {peer.name} is revoked")
            access = self.access
            if self.router is not None and (stopped := self.router.meets.kill_where(
                    lambda meet: bool(meet.principal) and access.stops(meet.principal,
                                                                       meet.serial),
                    "stopped: its principal's certificate is revoked")):
                log.warning("stopped %d meets of principals whose certificates are now "
                            "revoked", stopped)
            clients = self.router.clients.clients if self.router is not None else {}
            for address, client in list(clients.items()):
                place = client.channel.identity if client.channel is not None else None
                if place is not None and self.access.revoked(place):
                    log.warning("closing the connection to place %s: its certificate (%s) "
                                "is now revoked", address, place.name)
                    client.close()
                    clients.pop(address, None)
        except Exception:  # the check must go on, whatever one round met
            log.exception("checking the deny list failed; trying again")
        finally:
            self._recheck = asyncio.get_running_loop().call_later(REVOKED_RECHECK,
                                                                   self._recheck_revoked)

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    async def stop(self, grace: float | None = None) -> None:
        """Stop accepting, let running meets finish within `grace` seconds, kill the rest."""
        if self._stopping:
            await self._stopped.wait()
            return
        self._stopping = True
        if self._recheck is not None:
            self._recheck.cancel()
        router = self.router
        if self._server is not None:
            self._server.close()
        if router is not None:
            router.meets.stopping = True  # new meets are refused from now on
            router.residents.close()  # residents waiting in receive get none, and can end
            grace = self.settings.grace_seconds if grace is None else grace
            running = router.meets.tasks()
            if running:
                log.info("waiting up to %g s for %d running meets", grace, len(running))
                _, late = await asyncio.wait(running, timeout=grace)
                for task in late:
                    task.cancel()
                if late:
                    await asyncio.wait(late, timeout=10)
            await router.settle()
        for session in list(self.sessions):
            session.channel.close(f"place {self.address} is shutting down")
        if router is not None:
            await router.close()
        await self.cabinets.close()
        await self.journal.close()
        if router is not None:
            await router.agents.warm.close()
            await asyncio.gather(*(pool.close() for pool in router.agents.pools.values()),
                                 return_exceptions=True)
        for session in list(self.sessions):  # peers that did not take their last replies
            session.channel.abort()
        if self.cgroups is not None:
            self.cgroups.close()
        if self.uids is not None:
            self.uids.close()
        self.state.release()
        log.info("place %s stopped", self.address)
        self._stopped.set()


#: Seconds between rereads of the deny list by a running place.
REVOKED_RECHECK = 2.0


class _Closed(asyncio.Protocol):
    """A connection refused before its TLS handshake (a flood of handshakes): closed."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        cast(asyncio.Transport, transport).abort()


def write_admin_token(path: Path) -> str:
    """A new admin token for this run (for ag_admin: tacoma ps and kill), in a file only the
    place's user can read. On a full disk, the last run's token if its file holds one (it
    is as secret, and tacoma ps finds it there), else one in memory only (admin
    identities still work)."""
    token = secrets.token_hex(32)
    temporary = path.with_suffix(".tmp")
    temporary.unlink(missing_ok=True)
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(token + "\n")
        os.replace(temporary, path)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        if not disk_full(exc):
            raise
        try:
            kept = path.read_text().strip()
        except OSError:
            kept = ""
        if len(kept) == 64 and all(c in "0123456789abcdef" for c in kept):
            log.warning("the disk is full: the admin token of the last run stays in %s", path)
            return kept
        log.warning("the disk is full: no admin token can be written to %s; tacoma ps and "
                    "kill need an admin identity until the place starts with room", path)
    return token
