"""The agents a place is itself: ag_echo, ag_cabinet, ag_home and ag_admin.

They run no one's code and take no worker, so a meet of one is answered on the place's own
loop: ag_echo returns its briefcase (the null agent, for benchmarks and health checks),
ag_cabinet is the door to the cabinets (_cabinets), ag_home is where trips end (_trips),
and ag_admin lists and stops the agents at the place (`tacoma ps`, `tacoma kill`) for
whoever shows the place's admin token. Each gets the collaborator it needs, not the place.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from typing import Any

from ..wire._briefcase import Briefcase
from ..wire._errors import MeetError, NotAllowed, UnknownAgent
from ..wire._names import ADMIN_AGENT, CABINET_AGENT, HOME_AGENT
from ._cabinets import Cabinets
from ._meet import Meets
from ._residents import Residents
from ._trips import Trips

__all__ = ["BuiltIns"]

log = logging.getLogger("tacoma.place")


class BuiltIns:
    """Answers the meets of the place's own agents (wire._names.BUILT_IN)."""

    def __init__(self, cabinets: Cabinets, trips: Trips, meets: Meets, residents: Residents,
                 admin_token: str) -> None:
        self.cabinets = cabinets
        self.trips = trips
        self.meets = meets
        self.residents = residents
        self.admin_token = admin_token  # this run's, in the state directory (see _place)

    async def serve(self, agent: str, briefcase: Briefcase, who: str | None,
                    admin: bool = False) -> Briefcase:
        """Answer a meet of `agent` made by `who` (None: a client outside the place);
        `admin`: by an identity with the admin role."""
        if agent == CABINET_AGENT:
            return await self.cabinets.serve(briefcase, who)
        if agent == HOME_AGENT:
            if not self.trips.end(briefcase):
                log.info("a trip ended that nobody here waits for any more")
            return Briefcase()
        if agent == ADMIN_AGENT:
            return self._admin(briefcase, admin)
        return briefcase  # ag_echo

    # ------------------------------------------------------------------ ag_admin
    def _admin(self, request: Briefcase, admin: bool) -> Briefcase:
        """ag_admin: `ps` and `kill`, for an identity with the admin role, or whoever shows
        the place's admin token."""
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
        raise MeetError(f"unknown {ADMIN_AGENT} operation {op!r}: ps or kill")

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
        meet = resident.meet if resident is not None else self.meets.running.get(name)
        if meet is None or meet.worker is None or meet.id not in self.meets.running:
            raise UnknownAgent(f"no agent {name!r} is running at place {self.meets.address}",
                               "tacoma ps lists them")
        self.meets.kill(meet)
        return meet.id
