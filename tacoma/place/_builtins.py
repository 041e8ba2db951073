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

from .._version import __version__
from ..wire._briefcase import Briefcase
from ..wire._errors import MeetError, NotAllowed, UnknownAgent
from ..wire._names import (
    ADMIN_AGENT,
    BUILT_IN,
    CABINET_AGENT,
    HOME_AGENT,
    LAZY_AGENT,
    STATUS_AGENT,
    TRIP_AGENT,
)
from ..wire._text import shown
from ._agents import Agents
from ._cabinets import Cabinets
from ._codes import CodeStore
from ._journal import Journal, pack
from ._layers import Layer
from ._lazy import LazyStore
from ._meet import ALWAYS_SERVED, Meets
from ._residents import Residents
from ._settings import PlaceSettings
from ._trips import Trips

__all__ = ["BuiltIns"]

log = logging.getLogger("tacoma.place")


class BuiltIns:
    """Answers the meets of the place's own agents (wire._names.BUILT_IN)."""

    def __init__(self, cabinets: Cabinets, trips: Trips, meets: Meets, residents: Residents,
                 admin_token: str, journal: Journal, max_wait: float, *,
                 agents: Agents, layers: list[Layer], settings: PlaceSettings,
                 codes: CodeStore, lazy: LazyStore) -> None:
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

    async def serve(self, agent: str, briefcase: Briefcase, who: str | None,
                    admin: bool = False, principal: str = "",
                    origins: set[str] | None = None) -> Briefcase:
        """Answer a meet of `agent` made by `who` (None: a client outside the place) for
        `principal`; `admin`: by an identity with the admin role; `origins`: for an agent
        here, where the lazy folders handed to it are (the only places it may read from)."""
        if agent == CABINET_AGENT:
            return await self.cabinets.serve(briefcase, who, principal)
        if agent == LAZY_AGENT:
            return await self.lazy.serve(briefcase, principal, who is not None, self.max_wait,
                                         origins or set())
        if agent == HOME_AGENT:
            late = self.trips.end(briefcase, principal)
            if late is not None:  # its caller stopped waiting: the journal keeps the end
                trip_id, failure = late
                error = (failure.kind, failure.message, failure.detail) if failure else None
                meet_id = await self.journal.trip_ended(trip_id, principal,
                                                        briefcase if not failure else None,
                                                        error)
                if meet_id is None:
                    log.warning("trip %s of %s ended, but this place has no record of it",
                                trip_id, shown(principal, 80))
                else:
                    log.info("trip %s of meet %s ended after its caller stopped waiting; "
                             "its outcome is recorded", trip_id, meet_id)
            return Briefcase()
        if agent == ADMIN_AGENT:
            return await self._admin(briefcase, admin)
        if agent == STATUS_AGENT:
            return await self._status(briefcase, principal, admin)
        if agent == TRIP_AGENT:
            raise NotAllowed(f"{TRIP_AGENT} is for places only")
        return briefcase  # ag_echo

    # ------------------------------------------------------------------ ag_status
    async def _status(self, request: Briefcase, principal: str, admin: bool) -> Briefcase:
        """ag_status: what became of meet ID (queued, running, done, failed or unknown), for
        the principal it was made for (or an admin identity); with WAIT, wait up to that
        many seconds for it to end. Ids are per principal: another principal's meet is
        never found, as one the place never had (ids say nothing about who else meets
        here, and cannot hide one's own)."""
        ids = request.text("ID") if "ID" in request else []
        if len(ids) != 1:
            raise MeetError(f"{STATUS_AGENT} needs the meet's id in ID")
        meet_id = ids[0]
        try:
            wait = float(request.text("WAIT")[0]) if request.folder("WAIT") else 0.0
        except ValueError:
            raise MeetError("WAIT must be a number of seconds") from None
        if not math.isfinite(wait) or wait < 0:
            raise MeetError("WAIT must be a number of seconds, at least 0")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(wait, self.max_wait)
        while True:
            ended = self.journal.watch(meet_id)  # first: an end while we look is not missed
            try:
                answer = await self._state(meet_id, principal, admin)
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

    async def _state(self, meet_id: str, principal: str, admin: bool) -> Briefcase:
        answer = Briefcase(STATE=["unknown"], ID=[meet_id])
        whose = None if admin else principal
        found = self.meets.find(meet_id, whose)
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
            return Briefcase(KILLED=[self.kill(names[0] if names else "")])
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
                       "ended": pool.ended, "misses": pool.misses}
                      for agent, pool in sorted(pools.items())],
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
                "mailbox": len(resident.queue) if resident is not None else None,
            })
        return rows

    def kill(self, name: str) -> str:
        """Stop the agent that is resident as `name`, or runs meet `name`; its meet id."""
        resident = self.residents.get(name)
        found = self.meets.find(name, None)
        meet = resident.meet if resident is not None else found[1] if found else None
        if meet is None or meet.worker is None or meet.key not in self.meets.running:
            running = [*self.residents.by_name, *(m.id for m in self.meets.running.values())]
            close = difflib.get_close_matches(name, running, n=1, cutoff=0.7)
            guess = f"; did you mean {close[0]!r}?" if close else ""
            raise UnknownAgent(f"no agent {name!r} is running at place "
                               f"{self.meets.address}{guess}", "tacoma ps lists them")
        self.meets.kill(meet)
        return meet.id
