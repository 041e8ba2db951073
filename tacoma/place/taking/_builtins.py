"""The agents a place is itself: ag_echo, ag_cabinet, ag_home, ag_admin, ag_status, ag_trip.

They run no one's code and take no worker, so a meet of one is answered on the place's own
loop: ag_echo returns its briefcase (the null agent, for benchmarks and health checks),
ag_cabinet is the door to the cabinets (_cabinets), ag_home is where trips end (_trips),
ag_admin lists and stops the agents at the place (`tacoma ps`, `tacoma kill`) and sums the
place up (`tacoma status PLACE`: its pools, layers, meets, residents) for an admin identity
or whoever shows the place's admin token, ag_status says what became of a meet by its id
(`tacoma status`, from memory and the journal), and ag_trip answers rear guards and stops
trips (_trips). Each gets the collaborator it needs, not the place.
"""

from __future__ import annotations

import asyncio
import dataclasses
import difflib
import json
import logging
import math
import os
import secrets
import time
from typing import Any

import msgpack

from ..._version import __version__
from ...trust._passport import Passport
from ...wire._briefcase import HOME, TRACE, Briefcase
from ...wire._errors import LimitExceeded, MeetError, NotAllowed, NotAuthorized, UnknownAgent
from ...wire._names import (
    ADMIN_AGENT,
    BUILT_IN,
    CABINET_AGENT,
    HOME_AGENT,
    LAZY_AGENT,
    STATUS_AGENT,
    TRIP_AGENT,
)
from ...wire._text import shown
from .._settings import PlaceSettings
from ..meets._meet import ALWAYS_SERVED, Meets, RunningMeet
from ..meets._passports import Passports
from ..meets._residents import Residents
from ..meets._trips import Trips
from ..promises._journal import Journal, pack
from ..stores._cabinets import Cabinets
from ..stores._codes import CodeStore
from ..stores._lazy import LazyStore
from ..workers._agents import Agents
from ..workers._layers import Layer

__all__ = ["BuiltIns"]

log = logging.getLogger("tacoma.place")

#: The folders an ag_status request may carry (TRACE: a traced meet's), and the most bytes
#: of them: an id of at most 64 characters, a number and a principal's name fit many times.
STATUS_FOLDERS = frozenset({"ID", "WAIT", "PRINCIPAL", TRACE})
STATUS_REQUEST_BYTES = 4096


def _one(request: Briefcase, folder: str, what: str, default: str | None = None) -> str:
    """The one text element of `folder` in a request: MeetError if there are more, or none
    and no `default` (`what` the folder holds, for the message)."""
    try:
        values = request.text(folder) if folder in request else []
    except UnicodeDecodeError:
        raise MeetError(f"{folder} must be UTF-8 text") from None
    if len(values) == 1:
        return values[0]
    if not values and default is not None:
        return default
    raise MeetError(f"{folder} must hold {what or 'one element'}"
                    f"{'' if default is None else ', or be left out'}")


class BuiltIns:
    """Answers the meets of the place's own agents (wire._names.BUILT_IN)."""

    def __init__(self, cabinets: Cabinets, trips: Trips, meets: Meets, residents: Residents,
                 admin_token: str, journal: Journal, max_wait: float, *,
                 agents: Agents, layers: list[Layer], settings: PlaceSettings,
                 codes: CodeStore, lazy: LazyStore, passports: Passports) -> None:
        self.started = time.time()  # made as the place starts: its uptime counts from here
        self.codes = codes  # the programs meets name by hash (see _codes)
        self.lazy = lazy  # lazy folders' data kept here (see _lazy)
        self.agents = agents  # its pools and installed agents, for the status
        self.layers = layers  # the sandbox layers it applies (or not, and why)
        self.settings = settings
        self.cabinets = cabinets
        self.journal = journal
        self.max_wait = max_wait  # the longest an ag_status meet waits (--meet-seconds)
        self.trips = trips
        self.meets = meets
        self.residents = residents
        self.admin_token = admin_token  # this run's, in the state directory (see _place)
        self.passports = passports  # checks the lines of trips' ends (see _passports)

    async def trip_ended(self, briefcase: Briefcase, principal: str,
                         passport: Passport | None = None, lines: tuple[bytes, ...] = (),
                         sender: str = "") -> None:
        """ag_home: the end of a trip of `principal` that began here (from the place
        `sender` where it ended, or "": this one), under the agent's `passport`, with the
        `lines` of the places that handed it on: to its waiting caller, else to the
        journal; the path it took goes with it (see _passports). An end whose lines do not
        show this place's first hand-over and the sender's own end is not taken: a place
        that holds a trip's passport cannot end it unseen."""
        home = briefcase.folder(HOME)
        trip_id = home[0].decode("ascii", "replace") if home else ""
        path = None
        # Lines are checked only for a trip this place has (a flood of ends of made-up
        # trips costs no signature checks).
        if self.passports.seals is not None and (
                trip_id in self.trips.owners or await self.journal.has_trip(trip_id)):
            path = self.passports.path(trip_id, lines, passport)
            why = self.passports.end_holds(path, sender or self.passports.name)
            if why:
                log.warning("the end of trip %s from %s is not taken: %s", shown(trip_id, 40),
                            shown(sender or "this place", 80), why)
                return
        if path and any(step.note for step in path):
            log.warning("trip %s ended with a path that does not add up: %s",
                        shown(trip_id, 40), "; ".join(f"{step.place}: {step.note}"
                                                      for step in path if step.note))
        digest = passport.digest if passport is not None else ""
        late = self.trips.end(briefcase, principal, digest, path)
        if late is not None:  # its caller stopped waiting: the journal keeps the end
            trip_id, failure = late
            error = (failure.kind, failure.message, failure.detail) if failure else None
            packed = (msgpack.packb([step.to_wire() for step in path], use_bin_type=True)
                      if path is not None else None)
            meet_id = await self.journal.trip_ended(trip_id, principal,
                                                    briefcase if not failure else None,
                                                    error, digest, packed)
            if meet_id is None:
                log.warning("trip %s of %s ended, but this place has no record of it",
                            trip_id, shown(principal, 80))
            else:
                log.info("trip %s of meet %s ended after its caller stopped waiting; "
                         "its outcome is recorded", trip_id, meet_id)

    async def serve(self, agent: str, briefcase: Briefcase, who: str | None,
                    admin: bool = False, principal: str = "",
                    origins: set[str] | None = None, passport: Passport | None = None,
                    lines: tuple[bytes, ...] = (), via: str = "") -> Briefcase:
        """Answer a meet of `agent` made by `who` (None: a client outside the place) for
        `principal`; `admin`: by an identity with the admin role; `origins`: for an agent
        here, where the lazy folders handed to it are (the only places it may read from);
        `passport`: its agent's (handed on with a lazy folder's fetch elsewhere; a meet
        another place made, `via`, sees only its own launch's meets), and `lines`, those of
        a trip's end."""
        if agent == CABINET_AGENT:
            return await self.cabinets.serve(briefcase, who, principal)
        if agent == LAZY_AGENT:
            return await self.lazy.serve(briefcase, principal, who is not None, self.max_wait,
                                         origins or set(), passport)
        if agent == HOME_AGENT:  # from a place: the one that vouched, or the one itself
            await self.trip_ended(briefcase, principal, passport, lines, via or principal)
            return Briefcase()
        if agent == ADMIN_AGENT:
            return await self._admin(briefcase, admin)
        if agent == STATUS_AGENT:
            return await self._status(briefcase, principal, admin,
                                      passport if via else None)
        if agent == TRIP_AGENT:
            raise NotAllowed(f"{TRIP_AGENT} is for places only")
        return briefcase  # ag_echo

    # ------------------------------------------------------------------ ag_status
    async def _status(self, request: Briefcase, principal: str, admin: bool,
                      passport: Passport | None = None) -> Briefcase:
        """ag_status: what became of meet ID (queued, running, done, failed or unknown); with
        WAIT, wait up to that many seconds for it to end. Ids are per principal, for
        everyone: the meet is the asker's own, or, for an administrator, that of the
        principal named in PRINCIPAL. Another principal's meet is never found, as one the
        place never had (ids say nothing about who else meets here, and cannot hide one's
        own). A request another place makes for an agent (under its `passport`) is answered
        only for the meets of that passport's own launch: NotAuthorized for any other id.

        It takes no slot of --max-meets (see _meet.ALWAYS_SERVED), so it is bounded
        otherwise: a principal may have its share of them at once (`Meets.asking`), and a
        request holds an id, a number and a name, nothing more (one that carries more is
        refused at once, before it waits: what it carried is let go with it).
        """
        if request.at_least(len(STATUS_FOLDERS) + 1, STATUS_REQUEST_BYTES):
            raise LimitExceeded(f"{STATUS_AGENT} takes an ID, a WAIT and a PRINCIPAL, at most "
                                f"{STATUS_REQUEST_BYTES:,} bytes in all; this request carries "
                                "more: send only those")
        extra = [name for name in request if name not in STATUS_FOLDERS]
        if extra or request.lazy_refs():
            raise MeetError(f"{STATUS_AGENT} takes the folders ID, WAIT and PRINCIPAL (by "
                            f"value), and this request carries "
                            f"{', '.join(shown(name, 40) for name in extra[:4]) or 'lazy ones'}"
                            f"{', ...' if len(extra) > 4 else ''}: send only those")
        meet_id = _one(request, "ID", "the meet's id")
        try:
            wait = float(_one(request, "WAIT", "", "0"))
        except ValueError:
            raise MeetError("WAIT must be a number of seconds") from None
        if not math.isfinite(wait) or wait < 0:
            raise MeetError("WAIT must be a number of seconds, at least 0")
        whose = _one(request, "PRINCIPAL", "", principal)
        if whose != principal and not admin:
            raise NotAllowed(f"only an identity with the admin role may ask about another "
                             f"principal's meet (PRINCIPAL {shown(whose, 80)}); "
                             "ask about your own without it")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(wait, self.max_wait)
        with self.meets.asking(principal):  # counted against whoever asks
            while True:
                ended = self.journal.watch(meet_id)  # first: an end while we look is not missed
                try:
                    answer = await self._state(meet_id, whose, passport)
                    state = answer.text("STATE")[0]
                    left = deadline - loop.time()
                    if state not in ("queued", "running") or left <= 0:
                        return answer
                    try:
                        async with asyncio.timeout(left):
                            await ended
                    except TimeoutError:
                        pass
                finally:
                    self.journal.unwatch(meet_id, ended)

    async def _state(self, meet_id: str, whose: str, passport: Passport | None = None
                     ) -> Briefcase:
        """What became of meet `meet_id` of principal `whose` (under `passport`, if given:
        NotAuthorized unless it is a meet of that passport's launch)."""
        answer = Briefcase(STATE=["unknown"], ID=[meet_id])
        found = self.meets.find(meet_id, whose)
        if passport is not None:
            meet_passport = (found[1].passport.digest if found is not None
                             and found[1].passport is not None else "")
            if found is None:
                record = await self.journal.get(meet_id, whose)
                meet_passport = record.passport if record is not None else ""
            if meet_passport != passport.digest:
                raise NotAuthorized(f"invalid passport: it shows the meets of its own launch "
                                    f"({shown(passport.meet, 64)}) only, and meet "
                                    f"{shown(meet_id, 64)} is not one of them here")
        if found is not None:
            state, meet = found
            answer.replace("STATE", [state])
            answer.replace("AGENT", [meet.agent])
            answer.replace("RUNS", [str(meet.runs + (state == "running"))])
            trip = meet.trip
            where = self.trips.whereabouts.get(trip.id) if trip is not None else None
            if where is not None:  # a trip under way that began here
                answer.replace("HOPS", [str(where[0])])
                answer.replace("AT", [where[1]])
            return answer
        record = await self.journal.get(meet_id, whose)
        if record is None:
            return answer
        answer.replace("STATE", [record.state])
        answer.replace("AGENT", [record.agent])
        answer.replace("RUNS", [str(record.runs)])
        answer.replace("ACCEPTED", [repr(record.accepted)])
        if record.ended is not None:
            answer.replace("ENDED", [repr(record.ended)])
        if record.result is not None:
            answer["RESULT"] = [pack(record.result)]
        if record.error is not None:
            answer.replace("ERROR", list(record.error))
        if record.path is not None:
            answer["PATH"] = [json.dumps(step).encode() for step in record.path]
        return answer

    # ------------------------------------------------------------------ ag_admin
    async def _admin(self, request: Briefcase, admin: bool) -> Briefcase:
        """ag_admin: `ps`, `kill` and `status`, for an identity with the admin role, or
        whoever shows the place's admin token. All of the status is the admin's: the
        residents' names, its mailboxes and which layers are missing are no one else's
        business."""
        token = request.text("TOKEN")[0] if request.folder("TOKEN") else ""
        if not admin and not secrets.compare_digest(token.encode(),
                                                    self.admin_token.encode()):
            raise NotAllowed(f"{ADMIN_AGENT} needs an identity with the admin role (tacoma "
                             f"trust issue NAME --admin), or the admin token of place "
                             f"{self.meets.address} (tacoma ps and kill read it from the "
                             "place's state directory: --state-dir, or --token-file)")
        op = request.text("OP")[0] if request.folder("OP") else ""
        if op == "ps":
            return Briefcase(AGENTS=[json.dumps(row).encode() for row in self.ps()])
        if op == "kill":
            names = request.text("NAME") if request.folder("NAME") else []
            whose = request.text("PRINCIPAL") if request.folder("PRINCIPAL") else []
            return Briefcase(KILLED=[self.kill(names[0] if names else "",
                                               whose[0] if whose else None)])
        if op == "status":
            return Briefcase(STATUS=[json.dumps(await self.status()).encode()])
        raise MeetError(f"unknown {ADMIN_AGENT} operation {op!r}: ps, kill or status")

    async def status(self) -> dict[str, Any]:
        """The place in one screen (`tacoma status PLACE`; client._place_status reads it)."""
        now = time.time()
        pools = self.agents.pools
        installed = [name for name in self.agents.names()
                     if name not in BUILT_IN and name not in pools]
        residents = [{
            "name": r.name, "agent": r.meet.installed_as or r.meet.agent, "meet": r.meet.id,
            "messages": len(r.queue), "bytes": r.bytes, "received": r.received,
            "age": round(now - r.started, 3),
        } for r in sorted(self.residents.by_name.values(), key=lambda r: r.name)]
        return {
            "address": self.meets.address, "version": __version__, "pid": os.getpid(),
            "started": self.started, "uptime": round(now - self.started, 3),
            "state_dir": str(self.settings.state_dir),
            "agent_network": self.settings.agent_network,
            "layers": [{"layer": layer.name, "applied": layer.applied, "detail": layer.detail}
                       for layer in self.layers],
            "pools": [{"agent": agent, "language": pool.interpreter.language,
                       "ready": pool.ready, "size": pool.size, "most": pool.most,
                       "ended": pool.ended, "misses": pool.misses,
                       "idle_warm": self.agents.warm.idle_of(pool.interpreter.language),
                       "warm": pool.warm, "fresh": pool.fresh,
                       "runs_in": pool.runs_in, "at_once": pool.at_once}
                      for agent, pool in sorted(pools.items())],
            "reuse": {"setting": self.settings.reuse,
                      "applies": any(p.reuses for p in pools.values()),
                      "idle": self.agents.warm.idle, "most": self.agents.warm.most},
            "unavailable": sorted(set(self.agents.interpreters) - set(pools)),
            "installed": installed,
            "trusted": [{"name": a.name, "meets": a.meets, "problem": a.problem}
                        for _, a in sorted(self.agents.trusted.agents.items())],
            "meets": {
                # Not the always-served agents' (this very meet is one of them).
                "running": sum(1 for m in list(self.meets.running.values())
                               if m.agent not in ALWAYS_SERVED),
                "queued": len(self.meets.queued),
                "ended": sum(pool.ended for pool in pools.values()),
                "max_meets": self.meets.max_meets, "max_queued": self.meets.max_queued,
            },
            "residents": residents,
            "mailboxes": {"messages": sum(r["messages"] for r in residents),
                          "bytes": self.residents.total_bytes,
                          "max_bytes": self.residents.max_total_bytes},
            "cabinets": await self.cabinets.count(),
            "programs": dataclasses.asdict(self.codes.stats),
            # What a meet here competes for (tacoma advise): the host's load and cores, and
            # the CPU rate each agent gets (--cpus).
            "host": {"load": round(os.getloadavg()[0], 2), "cpus": os.cpu_count() or 1,
                     "agent_cpus": self.settings.limits.cpus},
            "lazy": self.lazy.status(),
        }

    def ps(self) -> list[dict[str, Any]]:
        """The agents running here now: one row each, residents named."""
        now = time.time()
        rows = []
        for meet in list(self.meets.running.values()):
            worker = meet.worker
            if worker is None:
                continue
            processes, cpu, rss = worker.usage()
            interpreter = worker.pool.interpreter
            resident = self.residents.of(meet)
            rows.append({
                "meet": meet.id, "name": meet.resident or "",
                "principal": meet.principal, "via": meet.via,
                "agent": meet.installed_as or interpreter.agent,
                "language": interpreter.language, "pid": worker.pid,
                "processes": processes, "age": round(now - meet.started, 3),
                "cpu": round(cpu, 3), "rss": rss,
                "network": worker.pool.settings.agent_network,
                "worker": ("warm" if worker.warm else "fresh")
                + (" thread" if worker.pool.runs_in == "place" else ""),
                "mailbox": len(resident.queue) if resident is not None else None,
            })
        return rows

    def kill(self, name: str, principal: str | None = None) -> str:
        """Stop the agent that is resident as `name`, or runs meet `name` (of `principal`,
        if given: then `name` is a meet id); its meet id.

        Meet ids are per principal, and a resident's name is whatever its agent chose, so
        without a principal `name` must be one of them only: two principals' meets with
        that id, or a resident of that name and a meet of that id, are refused, saying how
        to choose (--principal), never settled by which comes first.
        """
        where = f"at place {self.meets.address}"
        if principal is not None:
            found = self.meets.find(name, principal)
            meets = [found[1]] if found is not None else []
            whose = f" of {shown(principal, 80)}"
        else:
            resident = self.residents.get(name)
            meets = [meet for meet in list(self.meets.running.values())
                     if meet.id == name and meet.worker is not None]  # agents running
            whose = ""
            if resident is not None:
                if meets:
                    raise MeetError(
                        f"{name!r} is both a resident agent's name and the id of a meet of "
                        f"{_principals(meets)} {where}: stop the meet with --principal "
                        f"PRINCIPAL, or the resident by its own meet's id, "
                        f"{resident.meet.id}, with --principal "
                        f"{shown(resident.meet.principal, 80)}", "tacoma ps lists them")
                meets = [resident.meet]
            elif len(meets) > 1:
                raise MeetError(f"meets of {_principals(meets)} run {where} as {name!r} "
                                "(meet ids are per principal): say whose to stop with "
                                "--principal PRINCIPAL", "tacoma ps lists them")
        meet = meets[0] if meets else None
        if meet is None or meet.worker is None or meet.key not in self.meets.running:
            running = [*self.residents.by_name, *(m.id for m in self.meets.running.values())]
            close = difflib.get_close_matches(name, running, n=1, cutoff=0.7)
            guess = f"; did you mean {close[0]!r}?" if close else ""
            raise UnknownAgent(f"no agent {name!r}{whose} is running {where}{guess}",
                               "tacoma ps lists them")
        self.meets.kill(meet)
        return meet.id


def _principals(meets: list[RunningMeet]) -> str:
    """Whose `meets` are, for a message: their principals, each once, shown."""
    names = sorted({meet.principal for meet in meets})
    return ", ".join(shown(name, 80) if name else "anonymous" for name in names)
