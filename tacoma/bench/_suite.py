"""The mobile-agent benchmark suite of Dikaiakos, Kyriakou and Samaras (seed 002, sections 3
and 4), run against tacoma places.

Each benchmark is one activity of a mobile-agent system, repeated `n` times (the loop size)
and timed with a monotonic clock where the paper timed it: inside the agent that loops
(an agent at place A creating, dispatching or messaging), inside the agent that serves
(the proxy and the forwarding agents time their own service), or in the client (remote
creation and roaming, started from outside as in the paper). Every run checks that the
work was done (agents arrived, messages were received, hops were made, replies came back)
and raises BenchmarkFailed otherwise: a rate is only reported for work that happened.

The places: A (where agents start), B (the remote place), C and D (servers, destinations,
more stops of a roamer). Agents are minimal, messages carry one byte: as in the paper.

The places' limits are respected, never raised: a place runs at most its --share of
--max-meets for one principal (the suite's client and all its agents are one), and queues
async meets past it up to its share of --max-queued. So AD and FORW-MA keep at most
`Context.in_flight` dispatched agents queued or running at B (asking B's ag_status when
the oldest has ended), and wait for the last of them before they end; the client's own
meets that a busy place refuses (PlaceUnavailable) are tried again (`_admitted`). A
benchmark ends when its meets have: `teardown` stops its residents and waits for them to
end, and `measure` reports a failure as a result (with the runs done before it), so that
the next benchmark starts at quiet places whatever this one did.

    micro-benchmarks
    CL      an agent at A meets n minimal agents at A, one after another (sync: each is
            created, runs in a confined process of its own, and ends)
    CR      the client meets n minimal agents at B, one after another
    AD      an agent at A dispatches n minimal agents to B (async meets, each answered once
            B has taken it); all n are then checked to have run at B (untimed)
    MSG-1W  an agent at A sends n one-way messages to a resident at B
    MSG-2W  ... n messages with asynchronous acknowledgements, and takes every ack
    SYNCH   ... n requests, each waiting for the resident's reply
    MSG-MA  an agent at A sends a messenger agent on n round trips A -> B -> A
    micro-kernels
    ROAM    a roamer visits B, C, D and A in turn, n hops, and its briefcase comes home
    PROXY   `clients` agents at A send n requests (in all) to a resident proxy at B, which
            passes each to one of 3 resident servers at C and the reply back
    FORW-MSG  `clients` resident agents at A send n one-way requests to a forwarding agent
            at B, which redirects each to one of 3 servers at C; the servers answer the
            clients directly (FORW-MSG-6 and FORW-MSG-12: the paper's 6 and 12 clients)
    FORW-MA  agents dispatched from A to B ask a resident forwarding agent there where to
            go, and it sends them on to C; n agents, checked to arrive at C
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from .. import (
    Briefcase,
    MeetError,
    PlaceUnavailable,
    TacomaError,
    UnknownAgent,
    meet,
    request,
    status,
)
from ..agent._interpreter import PROGRAMS, Interpreter, discover_interpreters
from ._paper import UNITS

__all__ = ["BENCHMARKS", "BenchmarkFailed", "Context", "Measured", "Run", "RunInfo", "dumps",
           "languages", "measure"]

T = TypeVar("T")


class BenchmarkFailed(RuntimeError):
    """A benchmark did not do its work (or the check of it failed): no rate is reported."""


@dataclass
class Run:
    """One timed run: `ops` activities in `seconds`."""

    size: int
    ops: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.ops / self.seconds if self.seconds > 0 else math.inf

    @property
    def average(self) -> float:
        return self.seconds / self.ops if self.ops else math.nan


@dataclass
class Measured:
    """A benchmark's four metrics: total and average time per loop size, peak rate (the
    best loop size's), sustained rate (a run of at least `sustain` seconds).

    A failed benchmark is a result too: `failure` says why, `runs` holds the loop sizes
    done before it (shown, never rated), `sustained` is None unless that run was done."""

    name: str
    unit: str
    runs: list[Run]
    sustained: Run | None
    checked: str
    parameters: dict[str, object] = field(default_factory=dict)
    peak_from: int = 1  # the smallest loop size whose rate counts for the peak
    failure: str = ""  # why it failed: then no rate is reported

    @property
    def peak_rate(self) -> float:
        if self.failure or self.sustained is None:
            return math.nan
        return max(run.rate for run in [*self.runs, self.sustained]
                   if run.size >= self.peak_from)

    @property
    def sustained_rate(self) -> float:
        return math.nan if self.failure or self.sustained is None else self.sustained.rate

    @property
    def short_failure(self) -> str:
        """The failure's first line, cut to a table note's length (the whole of it is in
        the JSON and in --details)."""
        first = self.failure.strip().splitlines()[0] if self.failure.strip() else ""
        return first if len(first) <= _SHORT else first[:_SHORT - 3].rstrip() + "..."

    def to_json(self) -> dict[str, object]:
        sustained = self.sustained
        return {
            "name": self.name, "unit": self.unit, "parameters": self.parameters,
            "checked": self.checked,
            "runs": [{"loop_size": r.size, "ops": r.ops, "total_s": r.seconds,
                      "average_s": r.average, "rate": r.rate} for r in self.runs],
            "sustained": None if sustained is None else {
                "ops": sustained.ops, "total_s": sustained.seconds, "rate": sustained.rate},
            "peak_rate": None if self.failure else self.peak_rate,
            "sustained_rate": None if self.failure else self.sustained_rate,
            "failure": self.failure or None,
        }


#: Characters of a failure's reason in the table's notes and the plots' labels.
_SHORT = 120


def languages() -> dict[str, Interpreter]:
    """The languages the suite's agents can be written in: the installed interpreters'."""
    found: dict[str, Interpreter] = {}
    for interpreter in discover_interpreters().values():
        found.setdefault(interpreter.language, interpreter)
    return found


@dataclass
class Context:
    """Where and how the suite runs: four place addresses (A, B, C, D), the language of
    the agents created, dispatched and moved, the clients and servers of the
    micro-kernels, the agents' data and the messages' size."""

    places: list[str]
    language: str = "python"
    clients: int = 3
    servers: int = 3
    agent_bytes: int = 0  # data every created, dispatched or moved agent carries
    message_bytes: int = 1  # the payload of every message
    timeout: float = 600.0
    #: Agents AD and FORW-MA keep dispatched and not yet ended at once. Below the share of
    #: meets a place gives one principal (the suite's local places: 32, their --max-meets
    #: 128 and --share 0.25), so that they run at once and leave the client room for its
    #: own meets; at a place with a smaller share the rest queue there (async meets do).
    in_flight: int = 16
    #: How long the client tries again a meet a busy place refused (PlaceUnavailable).
    patience: float = 60.0

    @property
    def pad(self) -> list[bytes]:
        return [b"x" * self.agent_bytes] if self.agent_bytes else []

    @property
    def message(self) -> list[bytes]:
        return [b"x" * self.message_bytes]

    @functools.cached_property
    def interpreter(self) -> Interpreter:
        """The installed interpreter of `language` (the agents' programs are its own)."""
        try:
            return languages()[self.language]
        except KeyError:
            raise ValueError(f"no interpreter for language {self.language!r} is installed "
                             "(tacoma doctor lists them)") from None

    @property
    def agent(self) -> str:
        return self.interpreter.agent

    def program(self, kind: str) -> str:
        """The interpreter's program of this kind (see agent._interpreter.PROGRAMS)."""
        try:
            return self.interpreter.programs[kind]
        except KeyError:
            raise ValueError(f"the {self.language} interpreter has no {kind!r} program, which "
                             f"tacoma bench needs: one that {PROGRAMS[kind]}") from None

    def at(self, index: int, agent: str) -> str:
        return f"{agent}@{self.places[index]}"


#: What every driver (a Python agent that loops and times itself) starts with.
_DRIVER = """
import time
N = int(bc.text("N")[0])
PAD = bc.folder("PAD")  # what each agent created, dispatched or moved carries (agent size)
MSG = bc.folder("MSG") or [b"."]  # what each message carries (message size)
def finish(start, done):
    # The driver's answer: how many activities, in how many seconds since `start`.
    bc["ELAPSED"] = [repr(time.perf_counter() - start)]
    bc["DONE"] = [str(done)]
def retrying(op, *args, **kwargs):
    # A full mailbox or a busy place is backpressure: wait a moment and send again.
    while True:
        try:
            return op(*args, **kwargs)
        except (MailboxFull, PlaceUnavailable):
            time.sleep(0.001)
"""

_CL = _DRIVER + """
agent, code = bc.text("AGENT")[0], bc["MINIMAL"]
start = time.perf_counter()
for i in range(N):
    retrying(meet, agent, Briefcase(CODE=code, PAD=PAD))
finish(start, N)
"""

_AD = _DRIVER + """
from collections import deque
target, tag = bc.text("TARGET")[0], bc.text("TAG")[0]
extra = {"ROUTER": bc["ROUTER"]} if "ROUTER" in bc else {}
# The dispatched agents not yet ended, oldest first, and the most of them at once: the
# place's share of meets per principal is its limit, and agents past it only queue there,
# until the queue's share refuses this principal's meets, the benchmark's own included.
in_flight, window = deque(), int(bc.text("IN_FLIGHT")[0])
status = "ag_status@" + target.partition("@")[2]
def landed(most):
    # Wait until at most `most` dispatched agents are queued or running at the target.
    while len(in_flight) > most:
        answer = retrying(meet, status, {"ID": [in_flight[0]], "WAIT": ["30"]})
        if answer.text("STATE")[0] not in ("queued", "running"):
            in_flight.popleft()
start = time.perf_counter()
try:
    for i in range(N):
        landed(window - 1)
        in_flight.append(retrying(meet, target, Briefcase(CODE=bc["ARRIVER"], TAG=[tag],
                                                          PAD=PAD, **extra), mode="async"))
    finish(start, N)
finally:
    landed(0)  # untimed: the benchmark is over once its agents are gone, failed or not
"""

_MSG_1W = _DRIVER + """
sink = bc.text("SINK")[0]
start = time.perf_counter()
for i in range(N):
    retrying(send, sink, Briefcase(M=MSG))
finish(start, N)
"""

_MSG_2W = _DRIVER + """
from collections import deque
sink = bc.text("SINK")[0]
window = deque()
acked = 0
start = time.perf_counter()
for i in range(N):
    if len(window) >= 512:  # at most 512 unacknowledged at once (the API allows 1,024)
        wait_ack(window.popleft(), 60)
        acked += 1
    window.append(retrying(send_ack, sink, Briefcase(M=MSG)))
while window:
    wait_ack(window.popleft(), 60)
    acked += 1
finish(start, acked)
"""

_SYNCH = _DRIVER + """
sink = bc.text("SINK")[0]
start = time.perf_counter()
for i in range(N):
    answer = request(sink, Briefcase(PING=[str(i)], M=MSG))
    assert answer.text("PONG") == [str(i)], answer
finish(start, N)
"""

_MSG_MA = _DRIVER + """
agent, remote, home = bc.text("AGENT")[0], bc.text("REMOTE")[0], bc.text("HOME_PLACE")[0]
trips = 0
start = time.perf_counter()
for i in range(N):
    back = meet(agent, Briefcase(CODE=bc["ROAMER"], ITINERARY=[remote, home], PAD=PAD))
    trips += len(back.folder("HOPS")) == 3  # here, there, and back here
finish(start, trips)
"""

#: A resident sink: counts what it takes; answers PING requests with PONG, COUNT with the
#: count, STOP by ending.
_SINK = """
reside(bc.text("NAME")[0])
count = 0
while (m := receive()) is not None:
    kind = m.text("ENVELOPE")[1]
    if kind != "request":
        count += 1
    elif "PING" in m:
        reply(m, {"PONG": m["PING"]})
    elif "COUNT" in m:
        reply(m, {"COUNT": [str(count)]})
    elif "STOP" in m:
        reply(m, {})
        break
"""

#: A resident server for the micro-kernels: answers a request, or a one-way message with
#: REPLY_TO by a one-way message there (the Forwarding pattern).
_SERVER = """
reside(bc.text("NAME")[0])
while (m := receive()) is not None:
    if "STOP" in m:
        reply(m, {})
        break
    if "PING" in m:
        reply(m, {"PONG": m["PING"]})
        continue
    answer = {"ANSWER": m["Q"], "BY": [bc.text("NAME")[0]]}
    if m.text("ENVELOPE")[1] == "request":
        reply(m, answer)
    else:
        while True:
            try:
                send(m.text("REPLY_TO")[0], answer)
                break
            except MailboxFull:
                import time
                time.sleep(0.001)
"""

#: A resident that hands work on and times its own service: PROXY (requests to servers,
#: replies back), FORW-MSG (one-way messages redirected), FORW-MA (arriving agents told
#: where to go). STATS answers with how many it served and the time from taking the first
#: to answering the last, and starts counting again.
_MIDDLE = """
import itertools, time
reside(bc.text("NAME")[0])
servers = itertools.cycle(bc.text("SERVERS"))
served, first, last = 0, None, None
while (m := receive()) is not None:
    if "STATS" in m:
        reply(m, {"SERVED": [str(served)],
                  "ELAPSED": [repr((last - first) if served else 0.0)]})
        served, first, last = 0, None, None
        continue
    if "STOP" in m:
        reply(m, {})
        break
    taken = time.perf_counter()
    if first is None:
        first = taken
    if "WHERE" in m:  # FORW-MA: an agent asks where to go
        reply(m, {"GO": [bc.text("DESTINATION")[0]]})
    elif m.text("ENVELOPE")[1] == "request":  # PROXY
        reply(m, request(next(servers), {"Q": m["Q"]}))
    else:  # FORW-MSG
        while True:
            try:
                send(next(servers), {"Q": m["Q"], "REPLY_TO": m["REPLY_TO"]})
                break
            except MailboxFull:
                time.sleep(0.001)
    served += 1
    last = time.perf_counter()
    if served == 1:  # a single request's service time is its own span
        first = taken
"""

_PROXY_CLIENT = _DRIVER + """
proxy = bc.text("PROXY")[0]
answered = 0
for i in range(N):
    answer = request(proxy, {"Q": [str(i)], "M": MSG})
    answered += answer.text("ANSWER") == [str(i)]
bc["DONE"] = [str(answered)]
"""

_FORWARDED_CLIENT = _DRIVER + """
name = bc.text("NAME")[0]
reside(name)
forwarder = bc.text("FORWARDER")[0]
got = set()
def take():
    answer = receive(timeout=60)
    if answer is None:
        raise TimeoutError(f"{N - len(got)} answers did not come")
    got.add(answer.text("ANSWER")[0])
for i in range(N):
    # At most 256 requests out at once: answers go to this agent's own mailbox, and one
    # full of them would stop the servers, the forwarder and then this loop.
    while i - len(got) >= 256:
        take()
    retrying(send, forwarder, {"Q": [str(i)], "M": MSG, "REPLY_TO": [f"{name}@{place}"]})
while len(got) < N:
    take()
bc["DONE"] = [str(len(got))]
"""

#: An agent that arrives at the forwarding place, asks the resident there where to go,
#: and goes there; where it ends, it notes its arrival in the TAG cabinet.
_FORWARDED_AGENT = """
import time
if "GO" not in bc:
    answer = request(bc.text("ROUTER")[0], {"WHERE": [b"?"]})
    bc["GO"] = answer["GO"]
    while True:  # a destination at its --max-meets is backpressure: wait, and go again
        try:
            go(bc.text("GO")[0])
        except PlaceUnavailable:
            time.sleep(0.005)
cabinet_append(bc.text("TAG")[0], "ARRIVED", b".")
"""


# ----------------------------------------------------------------------- the benchmarks
def _elapsed(bc: Briefcase, n: int, what: str) -> Run:
    done = int(bc.text("DONE")[0])
    if done != n:
        raise BenchmarkFailed(f"{what}: {done} of {n} done")
    return Run(n, n, float(bc.text("ELAPSED")[0]))


def _admitted(ctx: Context, call: Callable[[], T]) -> T:
    """`call()` (a meet of the client's), tried again while its place refuses it as busy
    (PlaceUnavailable: at --max-meets, the principal at its share, or the queue's): the
    place's limits are back-pressure, and the meets holding its slots end. After
    `ctx.patience` seconds the refusal is the answer."""
    deadline = time.monotonic() + ctx.patience
    pause = 0.01
    while True:
        try:
            return call()
        except PlaceUnavailable:
            if time.monotonic() + pause > deadline:
                raise
            time.sleep(pause)  # back-pressure: slots free as meets end, no event to wait on
            pause = min(0.25, pause * 2)


def _drive(ctx: Context, index: int, code: str, n: int, programs: list[str] | None = None,
           **folders: list[str]) -> Briefcase:
    """Run a driver agent (Python) at place `index` with N = n (and the sizes); `programs`:
    those it starts at other places (its passport must name them)."""
    sizes = {"PAD": ctx.pad, "MSG": ctx.message, "IN_FLIGHT": [str(ctx.in_flight)]}
    return _admitted(ctx, lambda: meet(
        ctx.at(index, "ag_python"), {"N": [str(n)], **sizes, **folders}, code=code,
        timeout=ctx.timeout, programs=programs))


def _arrivals(ctx: Context, index: int, tag: str, n: int, what: str) -> None:
    """Wait until n agents noted their arrival at place `index` (untimed), or fail."""
    deadline = time.monotonic() + max(60.0, n * 0.2)
    count = 0
    while time.monotonic() < deadline:
        try:
            found = meet(ctx.at(index, "ag_cabinet"),
                         {"OP": ["read"], "CABINET": [tag], "FOLDER": ["ARRIVED"]})
        except PlaceUnavailable:  # busy (see _admitted): look again in a moment
            time.sleep(0.05)
            continue
        count = len(found.folder("ARRIVED"))
        if count >= n:
            _admitted(ctx, lambda: meet(ctx.at(index, "ag_cabinet"),
                                        {"OP": ["remove"], "CABINET": [tag]}))
            return
        time.sleep(0.05)
    raise BenchmarkFailed(f"{what}: {count} of {n} agents arrived")


class Benchmark:
    """One benchmark of the suite: `setup`, then `run(n)` per loop size, then `teardown`."""

    name = ""
    checked = ""
    kernel = False  # a micro-kernel (section 4), not a micro-benchmark (section 3)
    #: Benchmarks timed by the serving agent, from taking the first request to answering
    #: the last, have no span for one request: its service time is no rate, so the peak
    #: is taken from two requests up.
    peak_from = 1

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.tag = f"bench-{secrets.token_hex(4)}"
        self.residents: list[str] = []
        #: The async meets the client started (the residents'), as ID@PLACE: the benchmark
        #: is over when they have ended.
        self.started: list[str] = []

    def setup(self) -> None:
        """Start what the runs need (resident agents) and warm up (a C compile, say)."""

    def run(self, n: int) -> Run:
        raise NotImplementedError

    def teardown(self) -> None:
        """Stop the residents, and wait until every meet the client started has ended;
        BenchmarkFailed if one is still queued or running after `ctx.patience` seconds."""
        for target in self.residents:
            stop = functools.partial(request, target, {"STOP": [b""]}, timeout=30)
            with contextlib.suppress(MeetError):  # gone already: nothing to stop
                _admitted(self.ctx, stop)
        deadline = time.monotonic() + self.ctx.patience
        for started in self.started:
            state = "running"
            while state in ("queued", "running") and time.monotonic() < deadline:
                try:
                    state = status(started, wait=max(0.0, deadline - time.monotonic())
                                   ).state
                except PlaceUnavailable:  # busy (see _admitted): ask again in a moment
                    time.sleep(0.05)
            if state in ("queued", "running"):
                raise BenchmarkFailed(f"{self.name}: meet {started} was still {state} "
                                      f"{self.ctx.patience:.0f} s after it was told to stop")

    def resident(self, index: int, name: str, code: str, **folders: list[str]) -> str:
        """Start a resident agent (Python) at place `index`; its NAME@PLACE once it answers."""
        target = self.ctx.at(index, f"{name}-{self.tag}")
        meet_id = _admitted(self.ctx, lambda: meet(
            self.ctx.at(index, "ag_python"), {"NAME": [f"{name}-{self.tag}"], **folders},
            code=code, mode="async", timeout=self.ctx.timeout * 4))
        self.started.append(f"{meet_id}@{self.ctx.places[index]}")
        deadline = time.monotonic() + max(60.0, self.ctx.patience)
        while True:
            try:
                request(target, {"STATS": [b""]} if code is _MIDDLE else {"PING": [b""]},
                        timeout=10)
                break
            except (UnknownAgent, PlaceUnavailable):  # not started yet: queued, or busy
                if time.monotonic() > deadline:
                    raise BenchmarkFailed(f"resident {target} did not start") from None
                time.sleep(0.02)
        self.residents.append(target)
        return target


class CL(Benchmark):
    name = "CL"
    checked = "every created agent ran and ended (each sync meet returned)"

    def setup(self) -> None:
        _admitted(self.ctx, lambda: meet(  # warm: C compiles once, here
            self.ctx.at(0, self.ctx.agent), code=self.ctx.program("minimal"),
            timeout=self.ctx.timeout))

    def run(self, n: int) -> Run:
        bc = _drive(self.ctx, 0, _CL, n, AGENT=[self.ctx.agent],
                    MINIMAL=[self.ctx.program("minimal")])
        return _elapsed(bc, n, "CL")


class CR(CL):
    name = "CR"
    checked = "every created agent ran and ended at the remote place"

    def setup(self) -> None:
        _admitted(self.ctx, lambda: meet(self.ctx.at(1, self.ctx.agent),
                                         code=self.ctx.program("minimal"),
                                         timeout=self.ctx.timeout))

    def run(self, n: int) -> Run:
        target, code = self.ctx.at(1, self.ctx.agent), self.ctx.program("minimal")
        start = time.perf_counter()
        for _ in range(n):
            meet(target, {"PAD": self.ctx.pad}, code=code, timeout=self.ctx.timeout)
        return Run(n, n, time.perf_counter() - start)


class AD(Benchmark):
    name = "AD"
    checked = "every dispatched agent ran at the remote place (counted in a cabinet there)"

    def setup(self) -> None:
        _admitted(self.ctx, lambda: meet(self.ctx.at(1, self.ctx.agent),
                                         {"TAG": [self.tag + "-warm"]},
                                         code=self.ctx.program("arriver"),
                                         timeout=self.ctx.timeout))
        _arrivals(self.ctx, 1, self.tag + "-warm", 1, "AD warm-up")

    def run(self, n: int) -> Run:
        tag = f"{self.tag}-{n}-{secrets.token_hex(2)}"
        arriver = self.ctx.program("arriver")
        bc = _drive(self.ctx, 0, _AD, n, [arriver], TARGET=[self.ctx.at(1, self.ctx.agent)],
                    TAG=[tag], ARRIVER=[arriver])
        measured = _elapsed(bc, n, "AD")
        _arrivals(self.ctx, 1, tag, n, "AD")
        return measured


class _Messages(Benchmark):
    driver = ""

    def setup(self) -> None:
        self.sink = self.resident(1, "sink", _SINK)

    def run(self, n: int) -> Run:
        before = int(request(self.sink, {"COUNT": [b""]}).text("COUNT")[0])
        measured = _elapsed(_drive(self.ctx, 0, self.driver, n, SINK=[self.sink]), n,
                            self.name)
        if self.name != "SYNCH":
            deadline = time.monotonic() + 60
            while (got := int(request(self.sink, {"COUNT": [b""]}).text("COUNT")[0])
                   - before) < n:
                if time.monotonic() > deadline:
                    raise BenchmarkFailed(f"{self.name}: {got} of {n} messages received")
                time.sleep(0.02)
        return measured


class MSG_1W(_Messages):
    name = "MSG-1W"
    driver = _MSG_1W
    checked = "the resident took every message"


class MSG_2W(_Messages):
    name = "MSG-2W"
    driver = _MSG_2W
    checked = "every message was acknowledged to the sender and taken by the resident"


class SYNCH(_Messages):
    name = "SYNCH"
    driver = _SYNCH
    checked = "every request was answered with its own number"


class MSG_MA(Benchmark):
    name = "MSG-MA"
    checked = "every messenger came back from the remote place (3 visits counted)"

    def setup(self) -> None:
        self.run(1)

    def run(self, n: int) -> Run:
        bc = _drive(self.ctx, 0, _MSG_MA, n, AGENT=[self.ctx.agent],
                    REMOTE=[self.ctx.places[1]], HOME_PLACE=[self.ctx.places[0]],
                    ROAMER=[self.ctx.program("roamer")])
        return _elapsed(bc, n, "MSG-MA")


class ROAM(Benchmark):
    name = "ROAM"
    kernel = True
    checked = "the roamer's briefcase came home with one mark per visit"

    def setup(self) -> None:
        self.run(4)

    def run(self, n: int) -> Run:
        hops = max(4, n - n % 4)  # whole rounds of B, C, D, A
        stops = [self.ctx.places[i] for i in (1, 2, 3, 0)] * (hops // 4)
        start = time.perf_counter()
        back = meet(self.ctx.at(0, self.ctx.agent), {"ITINERARY": stops, "PAD": self.ctx.pad},
                    code=self.ctx.program("roamer"), timeout=self.ctx.timeout)
        seconds = time.perf_counter() - start
        visits = len(back.folder("HOPS"))
        if visits != hops + 1:
            raise BenchmarkFailed(f"ROAM: {visits - 1} of {hops} hops made")
        return Run(hops, hops, seconds)


class _Kernel(Benchmark):
    kernel = True
    peak_from = 2
    fixed_clients = 0  # a configuration of the paper's, whatever --clients says

    @property
    def client_count(self) -> int:
        return self.fixed_clients or self.ctx.clients

    def setup(self) -> None:
        self.servers = [self.resident(2, f"server{i}", _SERVER)
                        for i in range(self.ctx.servers)]

    def stats(self, middle: str) -> tuple[int, float]:
        answer = request(middle, {"STATS": [b""]})
        return int(answer.text("SERVED")[0]), float(answer.text("ELAPSED")[0])

    def clients(self, n: int, code: str, **folders: list[str]) -> list[int]:
        """Run the client agents at A at once, n requests among them; what each did."""
        count = self.client_count
        shares = [n // count + (i < n % count) for i in range(count)]
        done: list[int] = [0] * len(shares)
        errors: list[BaseException] = []

        def client(i: int) -> None:
            try:
                if shares[i]:
                    bc = _drive(self.ctx, 0, code, shares[i],
                                NAME=[f"client{i}-{self.tag}"], **folders)
                    done[i] = int(bc.text("DONE")[0])
            except BaseException as exc:  # noqa: BLE001 - reported below, in this thread
                errors.append(exc)

        threads = [threading.Thread(target=client, args=(i,)) for i in range(len(shares))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise BenchmarkFailed(f"{self.name}: a client failed: {errors[0]}")
        return done


class _Served(_Kernel):
    """A resident between clients at A and servers at C, timing its own service."""

    role = ""  # the resident's name, and the clients' folder naming it
    client = ""  # the clients' program

    def setup(self) -> None:
        super().setup()
        self.middle = self.resident(1, self.role, _MIDDLE, SERVERS=self.servers)

    def run(self, n: int) -> Run:
        self.stats(self.middle)
        done = self.clients(n, self.client, **{self.role.upper(): [self.middle]})
        served, seconds = self.stats(self.middle)
        if sum(done) != n or served != n:
            raise BenchmarkFailed(f"{self.name}: {sum(done)} of {n} answered, {served} "
                                  f"handled by the {self.role}")
        return Run(n, n, seconds)


class PROXY(_Served):
    name = "PROXY"
    checked = "every client request was answered by a server, through the proxy"
    role, client = "proxy", _PROXY_CLIENT


class FORW_MSG(_Served):
    name = "FORW-MSG"
    checked = "every request was forwarded, and its answer reached its client directly"
    role, client = "forwarder", _FORWARDED_CLIENT


class FORW_MSG_6(FORW_MSG):
    name = "FORW-MSG-6"
    fixed_clients = 6


class FORW_MSG_12(FORW_MSG):
    name = "FORW-MSG-12"
    fixed_clients = 12


class FORW_MA(_Kernel):
    name = "FORW-MA"
    checked = "every agent was told where to go by the forwarding agent and arrived there"

    def setup(self) -> None:
        self.router = self.resident(1, "router", _MIDDLE, SERVERS=[""],
                                    DESTINATION=[self.ctx.places[2]])

    def run(self, n: int) -> Run:
        tag = f"{self.tag}-{n}-{secrets.token_hex(2)}"
        self.stats(self.router)
        # The forwarded agents are Python agents whatever the language: they talk and move.
        _drive(self.ctx, 0, _AD, n, [_FORWARDED_AGENT], TARGET=[self.ctx.at(1, "ag_python")],
               TAG=[tag], ARRIVER=[_FORWARDED_AGENT], ROUTER=[self.router])
        _arrivals(self.ctx, 2, tag, n, "FORW-MA")
        served, seconds = self.stats(self.router)
        if served != n:
            raise BenchmarkFailed(f"FORW-MA: {served} of {n} agents routed")
        return Run(n, n, seconds)


BENCHMARKS: dict[str, type[Benchmark]] = {
    cls.name: cls for cls in (CL, CR, AD, MSG_1W, MSG_2W, SYNCH, MSG_MA, ROAM, PROXY,
                              FORW_MSG, FORW_MSG_6, FORW_MSG_12, FORW_MA)
}


def measure(ctx: Context, name: str, loop_sizes: list[int], sustain: float,
            progress: Callable[[str], None] = lambda _: None) -> Measured:
    """Run benchmark `name` at each loop size, then for at least `sustain` seconds.

    A failure (the work not done, a place's refusal: `_FAILURES`) is a result too, with
    the runs done before it, and the suite goes on with the next benchmark. Either way the
    benchmark's residents are stopped and its meets waited for."""
    bench = BENCHMARKS[name](ctx)
    runs: list[Run] = []
    sustained: Run | None = None
    failure = ""
    try:
        try:
            bench.setup()
            for n in loop_sizes:
                progress(f"{name}: loop size {n}")
                runs.append(bench.run(n))
            # The sustained run: as many activities as the last loop size's average says
            # fill `sustain` seconds (never fewer than that loop size), timed as one run.
            last = runs[-1]
            long = max(last.size, min(100_000, math.ceil(sustain / last.average)))
            progress(f"{name}: sustained run of {long}")
            sustained = bench.run(long)
        except _FAILURES as exc:  # the failure is the result, with its reason
            failure = _reason(exc)
    finally:  # an interrupt too: the residents are stopped, its meets waited for
        try:
            bench.teardown()
        except _FAILURES as exc:
            failure = failure or _reason(exc)
    return Measured(name, UNITS[name], runs, sustained, bench.checked,
                    {"places": len(ctx.places), "language": ctx.language,
                     "clients": (bench.client_count if isinstance(bench, _Kernel)
                                 else None),
                     "servers": ctx.servers if bench.kernel else None,
                     "loop_sizes": loop_sizes, "sustain_s": sustain,
                     "agent_bytes": ctx.agent_bytes, "message_bytes": ctx.message_bytes,
                     "in_flight": ctx.in_flight if name in ("AD", "FORW-MA") else None},
                    bench.peak_from, failure)


#: What a benchmark fails with: its own check, a place's or a meet's error, the system's
#: (a socket, a file), a language without a program the suite needs. Anything else is a
#: bug of the suite's, raised.
_FAILURES = (BenchmarkFailed, TacomaError, OSError, ValueError)


def _reason(exc: BaseException) -> str:
    """A failure's reason: a benchmark's own says what was not done; others, their type."""
    return str(exc) if isinstance(exc, BenchmarkFailed) else f"{type(exc).__name__}: {exc}"


@dataclass(frozen=True, slots=True)
class RunInfo:
    """What a reader of a run's table, JSON or plots needs to know of the run itself: when,
    on how many CPUs, which tacoma and Python, the agents' language, the places (local
    ones started for the run, or given) and their isolation, quick or full."""

    date: str  # local time, ISO 8601, to the minute
    cpus: int
    tacoma: str
    python: str
    language: str
    isolation: str  # a local place's setting ("default", "same-uid", ...), or "given places"
    places: str  # "4 local places", "given places", "1 local place"
    mode: str  # "quick" or "full"

    @classmethod
    def now(cls, language: str, isolation: str, places: str, quick: bool) -> RunInfo:
        import datetime
        import os
        import platform

        from .. import __version__

        return cls(datetime.datetime.now().astimezone().isoformat(" ", "minutes"),
                   os.cpu_count() or 0, __version__, platform.python_version(), language,
                   isolation, places, "quick" if quick else "full")

    def line(self) -> str:
        """The context in one line, for a plot's footer."""
        where = self.places if self.isolation == "given places" else \
            f"{self.places}, {self.isolation} isolation"
        return (f"{self.date} · {self.cpus} CPU{'s' if self.cpus != 1 else ''} · tacoma "
                f"{self.tacoma} (Python {self.python}) · agents in {self.language} · {where} "
                f"· {self.mode} run")

    def to_json(self) -> dict[str, object]:
        return {"date": self.date, "cpus": self.cpus, "tacoma": self.tacoma,
                "python": self.python, "language": self.language,
                "isolation": self.isolation, "places": self.places, "mode": self.mode}


def dumps(results: list[Measured], info: RunInfo | None = None) -> str:
    """The run as JSON: its context (`run`) and every benchmark, failed ones included."""
    return json.dumps({**({"run": info.to_json()} if info is not None else {}),
                       "benchmarks": [r.to_json() for r in results]}, indent=2)
