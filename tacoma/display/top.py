"""`tacoma top`'s view of places: a section per place, drawn anew at every sample.

The CLI (cli._top) asks each place what `tacoma status PLACE` and `tacoma ps` show, and
hands the answer, or why there was none, to the place's `PlaceWatch`; `frame` draws every
watch under one header. Values in, a rich renderable out: nothing here connects anywhere
or reads a clock (the times are given), so a frame is a function of what the places said.

A rate needs two answers: meets ended between them over the time between them, both as
the place counted them (its `ended` counters and its uptime), so that neither the
network's delay nor the client's clock enters it. The first answer has no rate (a dash), nor
has the first answer of a place that restarted (another pid or start time: its counters
began again). The place counts ended meets per worker pool, not per principal, so rates
are per place and per pool; per principal the view shows what runs now.

Everything a place said (its version, principals' and agents' names, an error's message)
is escaped (wire._text.escape) and handed to rich as Text, never as markup: "[bold]" in a
principal's name is shown, and an escape sequence in it is shown, not done.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.text import Text

from ..wire._text import escape
from . import console, grid, human_size, show
from .progress import human_duration

__all__ = ["AgentRow", "Answer", "NoAnswer", "PlaceWatch", "PoolFigures", "frame",
           "print_frame"]

#: What a rate shows until there are two answers to take it from: an en dash (as a
#: typographer writes "no figure").
NO_RATE = "\u2013"
#: Rows of agents (principal and agent) shown per place; the rest are counted, so that
#: several places still fit a screen.
MOST_ROWS = 10


@dataclass(frozen=True, slots=True)
class PoolFigures:
    """One worker pool, as the place counts it (see client._place_status.Pool)."""

    language: str
    agent: str
    ready: int
    size: int
    most: int
    ended: int
    misses: int
    idle_warm: int
    warm: int
    fresh: int


@dataclass(frozen=True, slots=True)
class AgentRow:
    """One agent running at the place: a row of `tacoma ps`."""

    principal: str
    via: str  # the place that vouched for the principal, if another did
    agent: str
    language: str
    worker: str  # "warm" (a reused worker) or "fresh"
    age: float
    cpu: float
    rss: int
    resident: str  # its name, if it is resident

    @property
    def whose(self) -> str:
        """Its principal, and the place that vouched for it if one did (as tacoma ps)."""
        principal = self.principal or "-"
        return f"{principal} via {self.via}" if self.via else principal


@dataclass(frozen=True, slots=True)
class Answer:
    """What a place said at one sample, and when it came (`at`: time.time())."""

    version: str
    pid: int
    started: float  # the place's time.time() when it started: tells a restart
    uptime: float  # seconds, as the place counted them
    running: int
    queued: int
    ended: int
    max_meets: int
    max_queued: int
    reuse: str  # --reuse: "same-program" or "never"
    reuses: bool  # whether it can reuse workers here
    warm_idle: int
    warm_most: int
    load: float
    cpus: int
    pools: tuple[PoolFigures, ...]
    agents: tuple[AgentRow, ...]
    at: float


@dataclass(frozen=True, slots=True)
class NoAnswer:
    """Why a place gave no answer: the error's kind and message, what to do (`hint`), and
    when (`at`: time.time())."""

    kind: str
    message: str
    hint: str
    at: float


class PlaceWatch:
    """One place watched: its last two answers (for rates), and since when it has been
    down or has been asked without answering yet. Times: `now` is time.monotonic(), for
    durations; an answer's `at` is time.time(), for the clock."""

    def __init__(self, place: str) -> None:
        self.place = place  # as the user named it: the section's title, up or down
        self.answer: Answer | None = None
        self.previous: Answer | None = None
        self.failure: NoAnswer | None = None
        self.down_since: float | None = None
        self.asked_since: float | None = None  # a sample under way, unanswered

    def asked(self, now: float) -> None:
        """A sample was sent (now)."""
        if self.asked_since is None:
            self.asked_since = now

    def observe(self, outcome: Answer | NoAnswer, now: float) -> None:
        """A sample's outcome came (now)."""
        self.asked_since = None
        if isinstance(outcome, NoAnswer):
            if self.failure is None:
                self.down_since = now
            self.failure = outcome
            return
        self.failure = self.down_since = None
        self.previous, self.answer = self.answer, outcome

    @property
    def up(self) -> bool:
        return self.answer is not None and self.failure is None

    # ------------------------------------------------------------------ rates
    def _span(self) -> tuple[Answer, Answer, float] | None:
        """The last two answers and the seconds between them, if a rate can be taken
        from them: the same run of the place, its clock gone forward."""
        old, new = self.previous, self.answer
        if old is None or new is None or (old.pid, old.started) != (new.pid, new.started):
            return None
        seconds = new.uptime - old.uptime
        return (old, new, seconds) if seconds > 0 else None

    def rate(self) -> float | None:
        """Meets ended per second at the place between its last two answers."""
        span = self._span()
        if span is None:
            return None
        old, new, seconds = span
        return max(0, new.ended - old.ended) / seconds

    def pool_rate(self, agent: str) -> float | None:
        """Meets ended per second in the pool of `agent` between the last two answers."""
        span = self._span()
        if span is None:
            return None
        old, new, seconds = span
        before = next((p.ended for p in old.pools if p.agent == agent), None)
        after = next((p.ended for p in new.pools if p.agent == agent), None)
        if before is None or after is None:
            return None
        return max(0, after - before) / seconds

    # ------------------------------------------------------------------ drawing
    def section(self, now: float, interval: float) -> RenderableType:
        """The place's section of a frame."""
        title = Text(escape(self.place), style="bold")
        waited = now - self.asked_since if self.asked_since is not None else 0.0
        if self.failure is not None:
            return self._down(title, now, interval)
        if self.answer is None:
            title.append(f"  asked, no answer yet ({human_duration(waited)})", style="yellow")
            return title
        a = self.answer
        title.append(escape(f"  tacoma {a.version}  up {human_duration(a.uptime)}  pid "
                            f"{a.pid}  load {a.load:g} on {a.cpus} cores"))
        if waited > interval:  # a sample under way for longer than it should take
            title.append(f"  no answer for {human_duration(waited)}", style="yellow")
        rate = self.rate()
        meets = Text.assemble(
            ("meets    ", "bold"),
            f"{a.running} running (at most {a.max_meets})  {a.queued} queued (at most "
            f"{a.max_queued})  {a.ended:,} ended  ",
            (_rate(rate), "bold" if rate else ""), " meets/s")
        warm = sum(p.warm for p in a.pools)
        fresh = sum(p.fresh for p in a.pools)
        workers = Text.assemble(("workers  ", "bold"), _reuse(a),
                                f"; served {warm:,} warm, {fresh:,} fresh since start")
        return Group(title, _indent(meets), _indent(workers), _indent(self._agents(a)),
                     _indent(self._pools(a)))

    def _down(self, title: Text, now: float, interval: float) -> RenderableType:
        assert self.failure is not None
        title.append("  DOWN", style="bold red")
        if self.down_since is not None and now - self.down_since >= 1:
            title.append(f" for {human_duration(now - self.down_since)}")
        if self.answer is not None:
            title.append(f" (last answered at {_clock(self.answer.at)})")
        why = Text(escape(f"{self.failure.kind}: {self.failure.message}"), style="red")
        lines: list[RenderableType] = [title, _indent(why)]
        if self.failure.hint:
            lines.append(_indent(Text(escape(f"hint: {self.failure.hint}"))))
        lines.append(_indent(Text(f"asking again every {_seconds(interval)}", style="dim")))
        return Group(*lines)

    def _agents(self, a: Answer) -> RenderableType:
        """The agents running, one row per principal and agent."""
        if not a.agents:
            return Text("no agents running", style="dim")
        groups: dict[tuple[str, str, str], list[AgentRow]] = {}
        for row in a.agents:
            groups.setdefault((row.whose, row.agent, row.language), []).append(row)
        ordered = sorted(groups.items(), key=lambda item: (-len(item[1]), item[0]))
        rows = [(whose, agent, language, len(runs),
                 sum(r.worker == "warm" for r in runs), sum(r.worker != "warm" for r in runs),
                 sum(bool(r.resident) for r in runs), human_duration(max(r.age for r in runs)),
                 f"{sum(r.cpu for r in runs):.2f}s", human_size(sum(r.rss for r in runs)))
                for (whose, agent, language), runs in ordered[:MOST_ROWS]]
        drawn: RenderableType = grid(
            ("PRINCIPAL", "AGENT", "LANGUAGE", "RUNNING", "WARM", "FRESH", "RESIDENT",
             "OLDEST", "CPU", "MEMORY"), rows,
            right=("RUNNING", "WARM", "FRESH", "RESIDENT", "OLDEST", "CPU", "MEMORY"))
        if len(ordered) <= MOST_ROWS:
            return drawn
        more = ordered[MOST_ROWS:]
        return Group(drawn, Text(f"... and {len(more)} more (principal, agent) with "
                                 f"{sum(len(runs) for _, runs in more)} running", style="dim"))

    def _pools(self, a: Answer) -> RenderableType:
        rows = [(p.language, p.agent, p.ready, p.size, p.most, f"{p.ended:,}",
                 _rate(self.pool_rate(p.agent)), p.misses, p.idle_warm, p.warm, p.fresh)
                for p in a.pools]
        pools: RenderableType = grid(
            ("LANGUAGE", "AGENT", "READY", "POOL", "MOST", "ENDED", "MEETS/S", "MISSED",
             "WARM", "SERVED WARM", "FRESH"), rows,
            right=("READY", "POOL", "MOST", "ENDED", "MEETS/S", "MISSED", "WARM",
                   "SERVED WARM", "FRESH"))
        return pools


def frame(watches: Sequence[PlaceWatch], *, interval: float, now: float, clock: float,
          keys: bool) -> RenderableType:
    """One frame: a header line (the time is `clock`, a time.time()), then each place's
    section; `keys`: whether q is read (the header says so)."""
    up = sum(watch.up for watch in watches)
    header = Text.assemble(
        ("tacoma top", "bold"),
        f"  {_clock(clock)}  every {_seconds(interval)}  {len(watches)} "
        f"place{'s' if len(watches) != 1 else ''}, {up} up")
    if keys:
        header.append("  (q quits)", style="dim")
    parts: list[RenderableType] = [header]
    for watch in watches:
        parts += [Text(""), watch.section(now, interval)]
    return Group(*parts)


def print_frame(renderable: RenderableType, file: IO[str] | None = None) -> None:
    """Print a frame once (--once, or each frame when not in a terminal): in a terminal
    as it is drawn live; elsewhere as plain text at its full width (display.show)."""
    show(renderable, console(file))


# ---------------------------------------------------------------------------- pieces
def _indent(renderable: RenderableType) -> Padding:
    return Padding(renderable, (0, 0, 0, 2))


def _rate(rate: float | None) -> str:
    if rate is None:
        return NO_RATE
    return f"{rate:.1f}" if rate < 100 else f"{rate:,.0f}"


def _reuse(a: Answer) -> str:
    """How the place uses its workers, in a few words (tacoma status says it at length)."""
    if a.reuse == "never":
        return "fresh for every meet (--reuse never)"
    if not a.reuses:
        return "fresh for every meet (reuse cannot apply here: see tacoma status)"
    return (f"reused (same principal and program; fresh instances: any program), "
            f"{a.warm_idle} warm idle of at most {a.warm_most}")


def _clock(at: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at))


def _seconds(seconds: float) -> str:
    return f"{seconds:g}s"
