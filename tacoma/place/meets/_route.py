"""Where a meet goes and what state it is in, as tables.

h11's `_state.py` is the model: everything that decides a meet's way through the place
lives here, as data, and the code that acts on it (`taking._router`) only looks it up.

**Routes.** A meet is resolved once, when the place takes it, into a `Route`: what its name
finds here (`Kind`: the null agent, one of the place's own agents, a trusted agent, an
agent run in a worker, a resident, the agent's own mailbox) or, for an agent's meet, that
it moves on (`go`) or meets an agent at another place. `TAKE` maps (kind, mode, whether an
agent here made the meet) to the `Way` the router takes it; a pair the table lacks is
refused, with the reason `refusal` gives.

**States.** A meet's life at a place is a `State`: taken, perhaps queued (an async meet
waiting for a slot), running, moving (its agent's `go` under way), moved (the next place
took its agent), and one of three ends (ended, failed, cancelled). `TRANSITIONS` lists the
changes allowed; `RunningMeet.to` checks each one as it happens, and a change the table
lacks is a bug of the place (BadTransition). The journal writes its rows at the same
transitions: taken as async (queued), running (a start counted), moving (a trip begun), an
end.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ...wire._errors import MeetError, MessageError
from ..workers._agents import Found

__all__ = ["TAKE", "TRANSITIONS", "BadTransition", "Kind", "Route", "State", "Way",
           "refusal"]


class Kind(enum.Enum):
    """What a meet's name finds at this place."""

    ECHO = "the null agent (ag_echo)"
    BUILT_IN = "one of the place's own agents (ag_cabinet, ag_status, ag_admin, ag_lazy)"
    HOME = "a trip's end, from the place where it ended (ag_home)"
    TRIPS = "other places' rear guards and stops (ag_trip)"
    TRUSTED_CALL = "a trusted agent whose meet is a plain function"
    TRUSTED = "a trusted agent run in the place's own process"
    POOLED = "an agent run in a worker of a pool"
    RESIDENT = "a resident agent: the meet is a message to its mailbox"
    MAILBOX = "the meeting agent's own mailbox (ag_mailbox)"
    MOVE = "the meeting agent moves on to another place (go)"
    REMOTE = "an agent at another place"


class Way(enum.Enum):
    """How the router takes a meet (see taking._router: one method each)."""

    ECHO = "answered at once with its own briefcase, holding no slot"
    CALL = "a plain trusted function, called on the place's loop, holding no slot"
    SERVE = "the place's own service, for an agent here: no slot (it runs no agent)"
    RUN = "a counted meet of its own, answered with its result"
    SUBMIT = "an async meet: journaled, answered Accepted, then run or queued"
    MESSAGE = "a message to a resident: its reply, or Accepted"
    HOP = "a moving agent arriving: taken once, answered Accepted, then run"
    MOVE = "the meeting agent is handed on to another place"
    FORWARD = "met at another place, through this place's client, for the same principal"
    MAILBOX = "the meeting agent's own mailbox"


@dataclass(frozen=True, slots=True)
class Route:
    """Where one meet goes: its kind, the agent's name, how this place runs it (`found`, for
    the kinds the place runs), and the other place (`address`: MOVE and REMOTE)."""

    kind: Kind
    agent: str
    found: Found | None = None
    address: str = ""


#: The kinds this place runs itself or in a worker (a meet of its own, if counted).
_RUNNABLE = (Kind.ECHO, Kind.BUILT_IN, Kind.TRUSTED_CALL, Kind.TRUSTED, Kind.POOLED)

#: (kind, mode, made by an agent here) -> how the router takes it. From outside means a
#: client's or another place's meet, over a session.
TAKE: dict[tuple[Kind, str, bool], Way] = {
    # From outside: the null agent and plain trusted functions are answered at once; the
    # place's own agents and every other agent are meets of their own (counted, killable).
    (Kind.ECHO, "sync", False): Way.ECHO,
    (Kind.TRUSTED_CALL, "sync", False): Way.CALL,
    **{(kind, "sync", False): Way.RUN
       for kind in (Kind.BUILT_IN, Kind.HOME, Kind.TRIPS, Kind.TRUSTED, Kind.POOLED)},
    **{(kind, "async", False): Way.SUBMIT for kind in _RUNNABLE},
    **{(kind, "go", False): Way.HOP for kind in _RUNNABLE},
    **{(Kind.RESIDENT, mode, False): Way.MESSAGE for mode in ("sync", "ack", "async")},
    # From an agent here: the place's own services run no agent, so an admitted agent may
    # use them even while the place is at --max-meets; every other agent is a meet of its
    # own, counted against --max-meets and its principal's share like anyone's.
    (Kind.ECHO, "sync", True): Way.SERVE,
    (Kind.BUILT_IN, "sync", True): Way.SERVE,
    **{(kind, "sync", True): Way.RUN
       for kind in (Kind.TRUSTED_CALL, Kind.TRUSTED, Kind.POOLED)},
    **{(kind, "async", True): Way.SUBMIT for kind in _RUNNABLE},
    **{(Kind.RESIDENT, mode, True): Way.MESSAGE for mode in ("sync", "ack", "async")},
    **{(Kind.MAILBOX, mode, True): Way.MAILBOX for mode in ("sync", "ack", "async")},
    **{(Kind.REMOTE, mode, True): Way.FORWARD for mode in ("sync", "ack", "async")},
    (Kind.MOVE, "go", True): Way.MOVE,
}


def refusal(route: Route, mode: str) -> MeetError:
    """Why the place does not take a meet whose (kind, mode) the table lacks."""
    if mode == "ack":
        return MessageError(f"the ack mode is for messages to resident agents, and "
                            f"{route.agent} is not one here")
    if route.kind in (Kind.HOME, Kind.TRIPS):
        return MeetError(f"{route.agent} is met in sync mode, by places")
    return MeetError(f"{route.agent} cannot be met in the {mode} mode here")


class State(enum.Enum):
    """Where a meet is in its life at this place."""

    TAKEN = "taken, not yet running"
    QUEUED = "waiting for a slot (an async meet; its briefcase waits in the journal)"
    RUNNING = "its agent runs, or the place serves it"
    MOVING = "its agent's go is under way"
    MOVED = "its agent went on: the next place took it"
    ENDED = "answered with its result"
    FAILED = "answered with an error"
    CANCELLED = "stopped: killed, its caller gone, or the place stopping"


_ENDS = frozenset({State.ENDED, State.FAILED, State.CANCELLED})

#: The changes of state a meet may make; the ends are final.
TRANSITIONS: dict[State, frozenset[State]] = {
    State.TAKEN: frozenset({State.QUEUED, State.RUNNING, *_ENDS}),
    # A queued meet fails before it runs if the journal cannot give back its briefcase.
    State.QUEUED: frozenset({State.RUNNING, State.FAILED, State.CANCELLED}),
    State.RUNNING: frozenset({State.MOVING, *_ENDS}),
    # A hand-over that fails leaves the agent here, running.
    State.MOVING: frozenset({State.RUNNING, State.MOVED, State.FAILED, State.CANCELLED}),
    # A trip that began here: its meet ends when the trip's end comes home.
    State.MOVED: _ENDS,
    State.ENDED: frozenset(),
    State.FAILED: frozenset(),
    State.CANCELLED: frozenset(),
}


class BadTransition(RuntimeError):
    """A change of state the table does not allow: a bug of the place, not of a meet."""
