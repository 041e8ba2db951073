"""The reserved agent names: the agents a place is itself, defined once for every side.

A place answers these meets itself, with no worker and no one's code: the agent side meets
them by name (cabinets, the mailbox), the place dispatches on them, and `tacoma install`
refuses them as names for installed agents. Folder names with a meaning to the system are
in `_briefcase` (CODE, ITINERARY, HOME, ENVELOPE, TRACE).
"""

from __future__ import annotations

__all__ = ["ADMIN_AGENT", "BUILT_IN", "CABINET_AGENT", "ECHO_AGENT", "HOME_AGENT", "LAZY_AGENT",
           "MAILBOX_AGENT", "RESERVED_AGENTS", "STATUS_AGENT", "TRIP_AGENT"]

#: The null agent: returns the briefcase it got. For benchmarks and health checks.
ECHO_AGENT = "ag_echo"
#: The door to the place's cabinets (see place/_cabinets).
CABINET_AGENT = "ag_cabinet"
#: Where a moving agent's trip ends, at its home place (see place/_trips).
HOME_AGENT = "ag_home"
#: Lists and stops the agents at the place, for whoever holds its admin token.
ADMIN_AGENT = "ag_admin"
#: What became of a meet, by its id: queued, running, done (with its result), failed (with
#: its error) or unknown (see place/_journal; `tacoma status`).
STATUS_AGENT = "ag_status"
#: Between places, for trips on the way: where a trip is now (a rear guard's heartbeat),
#: and stopping one (see place/_trips).
TRIP_AGENT = "ag_trip"
#: A resident agent's mailbox: reside, receive, reply (see place/_residents). Only an agent
#: reaches it, over its own worker channel.
MAILBOX_AGENT = "ag_mailbox"

#: Lazy folders' data at the place that keeps it: kept for an agent here, read by agents
#: anywhere (see place/_lazy).
LAZY_AGENT = "ag_lazy"

#: Agents the place answers itself, with no worker, for clients and agents alike.
BUILT_IN = (ECHO_AGENT, CABINET_AGENT, HOME_AGENT, ADMIN_AGENT, STATUS_AGENT, TRIP_AGENT,
            LAZY_AGENT)
#: Every name a place keeps for itself.
RESERVED_AGENTS = frozenset({*BUILT_IN, MAILBOX_AGENT})
