"""The router's tables (place.meets._route): where each meet goes, and a meet's life.

These hold the tables to what the place promises; the meets themselves, through real
places, are in test_place, test_messages, test_mobility and test_durability.
"""

from __future__ import annotations

import pytest
from tacoma.place.meets._meet import RunningMeet
from tacoma.place.meets._route import (
    TAKE,
    TRANSITIONS,
    BadTransition,
    Kind,
    Route,
    State,
    Way,
    refusal,
)
from tacoma.wire._briefcase import Briefcase
from tacoma.wire._errors import MeetError, MessageError
from tacoma.wire._events import MODES

ENDS = {State.ENDED, State.FAILED, State.CANCELLED}


def test_every_pair_the_table_names_is_a_real_kind_mode_and_way() -> None:
    for (kind, mode, by_agent), way in TAKE.items():
        assert isinstance(kind, Kind) and isinstance(way, Way) and isinstance(by_agent, bool)
        assert mode in MODES


def test_every_way_is_taken_by_some_meet() -> None:
    assert set(TAKE.values()) == set(Way)


@pytest.mark.parametrize("by_agent", [False, True], ids=["outside", "agent"])
@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("kind", list(Kind), ids=lambda k: k.name)
def test_a_pair_the_table_lacks_is_refused_with_a_reason(kind: Kind, mode: str,
                                                         by_agent: bool) -> None:
    if (kind, mode, by_agent) in TAKE:
        return
    error = refusal(Route(kind, "ag_x"), mode)
    assert isinstance(error, MeetError)
    assert "ag_x" in str(error)
    if mode == "ack":
        assert isinstance(error, MessageError)
        assert "resident" in str(error)


def test_only_places_move_agents_here_and_only_agents_move_on() -> None:
    assert {way for (_, mode, by_agent), way in TAKE.items() if mode == "go"} \
        == {Way.HOP, Way.MOVE}
    assert all(not by_agent for (_, _, by_agent), way in TAKE.items() if way is Way.HOP)
    assert [key for key, way in TAKE.items() if way is Way.MOVE] \
        == [(Kind.MOVE, "go", True)]


def test_a_trips_end_and_rear_guards_are_met_in_sync_mode_only() -> None:
    for kind in (Kind.HOME, Kind.TRIPS):
        assert [mode for (k, mode, _) in TAKE if k is kind] == ["sync"]
        assert "sync mode, by places" in str(refusal(Route(kind, "ag_home"), "async"))


def test_what_holds_no_slot_is_only_the_null_agent_plain_functions_and_services() -> None:
    free = {(kind, by_agent) for (kind, _, by_agent), way in TAKE.items()
            if way in (Way.ECHO, Way.CALL, Way.SERVE)}
    assert free == {(Kind.ECHO, False), (Kind.TRUSTED_CALL, False), (Kind.ECHO, True),
                    (Kind.BUILT_IN, True)}


def test_the_ends_are_final_and_every_state_can_end() -> None:
    for end in ENDS:
        assert TRANSITIONS[end] == frozenset()
    for state in set(State) - ENDS:
        assert TRANSITIONS[state] & ENDS, state
    assert set(TRANSITIONS) == set(State)


def test_an_agent_moves_only_from_running_and_is_moved_only_through_moving() -> None:
    assert [s for s, after in TRANSITIONS.items() if State.MOVING in after] == [State.RUNNING]
    assert [s for s, after in TRANSITIONS.items() if State.MOVED in after] == [State.MOVING]
    assert State.RUNNING in TRANSITIONS[State.MOVING]  # a hand-over that failed


def meet() -> RunningMeet:
    return RunningMeet("m.1", "ag_python", Briefcase(), 10.0, "alice")


def test_a_meet_lives_through_its_states() -> None:
    m = meet()
    assert m.state is State.TAKEN
    for state in (State.RUNNING, State.MOVING, State.RUNNING, State.MOVING, State.MOVED):
        m.to(state)
        assert m.state is state
    m.ends(None)
    assert m.state is State.ENDED


@pytest.mark.parametrize(("outcome", "state"), [(None, State.ENDED),
                                           (MeetError("x"), State.FAILED)])
def test_how_a_meet_ends_is_its_state(outcome: BaseException | None, state: State) -> None:
    m = meet()
    m.to(State.RUNNING)
    m.ends(outcome)
    assert m.state is state


def test_a_cancelled_meet_is_cancelled() -> None:
    import asyncio

    m = meet()
    m.to(State.QUEUED)
    m.ends(asyncio.CancelledError())
    assert m.state is State.CANCELLED


@pytest.mark.parametrize("path", [
    (State.MOVED,),  # not without a hand-over
    (State.RUNNING, State.MOVED),
    (State.RUNNING, State.ENDED, State.RUNNING),  # an end is final
    (State.RUNNING, State.QUEUED),  # a running meet does not go back to the queue
])
def test_a_change_the_table_forbids_is_a_bug_and_says_so(path: tuple[State, ...]) -> None:
    m = meet()
    *allowed, forbidden = path
    for state in allowed:
        m.to(state)
    with pytest.raises(BadTransition, match=f"to {forbidden.name}"):
        m.to(forbidden)
    assert m.state is (allowed[-1] if allowed else State.TAKEN)  # unchanged
