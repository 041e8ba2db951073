"""Traced meets: where the time of one meet goes, step by step, on every side.

A meet is traced when its briefcase carries a TRACE folder (a reserved name). Each side
then reads a monotonic clock (time.perf_counter_ns) around its own steps and appends them
to the TRACE folder of the result, one element per step: b"SIDE|STEP|NANOSECONDS". An
untraced meet reads no clock for tracing: the place and the client test for the folder
once, and a worker reads the clock once per read of its channel (it cannot know a meet is
traced before it has decoded it).

The steps, after TACOMA's Table 1 (seed 000), which times the 13 steps of a TACOMA v1.3
meet; `TACOMA_STEPS` maps ours to theirs for `tacoma bench breakdown`:

    client  marshal                 encode the Meet frame                       (1)
    client  connect or reuse        a cached connection, or a new one           (2)
    client  send                    write the frame to the socket               (4)
    place   examine                 protocol checks done, admission, bookkeeping (5b)
    place   find agent              resolve the agent's name                    (6)
    place   take worker             a pre-started, confined worker from the pool (3, 7, 8)
    place   hand to worker          write the Meet on the worker's socketpair   (9)
    worker  receive and unmarshal   read and decode the Meet                    (10b)
    worker  start                   prepare the program (Python: compile it; the
                                    other languages report it within run)       (10a)
    worker  run                     run the agent                               (10c)
    worker  return                  encode the Result, and the place take it: the
                                    place's wait less the worker's own steps    (11)
    client  transfer                the network, both frames' decoding, and waiting
                                    to be scheduled (the client's send and wait,
                                    less the place's own span)                  (5a, 12)
TACOMA's step 13 (closing the TCP connection) has no counterpart: connections are kept.
"""

from __future__ import annotations

from ._briefcase import TRACE, Briefcase

__all__ = ["TACOMA_STEPS", "TACOMA_UNMATCHED", "TRACE", "read", "record"]

#: Our steps -> (TACOMA's step labels, their median µs summed), Table 1 of seed 000.
TACOMA_STEPS: dict[tuple[str, str], tuple[str, int]] = {
    ("client", "marshal"): ("1 marshal", 31),
    ("client", "connect or reuse"): ("2 TCP connect", 597),
    ("client", "send"): ("4 transmit", 57),
    ("client", "transfer"): ("5a receive + 12 return to client", 1507 + 554),
    ("place", "examine"): ("5b examine", 3),
    ("place", "find agent"): ("6 locate agent", 152),
    ("place", "take worker"): ("3 fork + 7 pipes + 8 vfork/exec", 1678 + 97 + 346 + 509 + 2147),
    ("place", "hand to worker"): ("9 transfer briefcase", 133),
    ("worker", "receive and unmarshal"): ("10b agent receives briefcase", 2535),
    ("worker", "start"): ("10a agent start", 8137),
    ("worker", "run"): ("10c unmarshal and run", 606),
    ("worker", "return"): ("11 return status", 2374),
}
#: TACOMA's step 13 (closing the connection), which has no counterpart here.
TACOMA_UNMATCHED = ("13 terminate", 212)


def record(briefcase: Briefcase, side: str, steps: list[tuple[str, int]]) -> None:
    """Append `steps` ((name, nanoseconds) pairs) of `side` to the briefcase's TRACE."""
    for step, ns in steps:
        briefcase.append(TRACE, f"{side}|{step}|{ns}".encode())


def read(briefcase: Briefcase, take: bool = True) -> list[tuple[str, str, int]]:
    """The (side, step, nanoseconds) a traced result carries (taken out of it, or not)."""
    steps = []
    elements = briefcase.folder(TRACE)
    if take:
        briefcase.remove(TRACE)
    for element in elements:
        side, step, ns = element.decode("utf-8", "replace").split("|")
        steps.append((side, step, int(ns)))
    return steps
