"""`tacoma top [PLACE]...`: places watched live, as htop watches a host.

A sample of a place is the two ag_admin meets that `tacoma status PLACE` and `tacoma ps`
make (operations `status` and `ps`, with the same admin token), run on the client's
background loop, every place's at once; display.top keeps what each place said and draws
it (rates come from two successive answers, see there). No new message, nothing new at
the place.

The main thread drives. At each tick it starts a sample of every place that has none
under way, waits for them (reading keys meanwhile) until they are in or the tick is over,
and draws a frame: a slow place never holds the others' frames back past a tick, and it
is shown waiting, then down once --timeout has passed. A place that cannot be reached is
shown down with the reason and asked again at every tick, so it comes back by itself (the
client connects anew where its cached connection broke). The last frame of a bounded run
(--once, --iterations) waits for every place's answer instead (each step of a sample, the
connection and the two meets, bounded by --timeout): its exit status says whether they
all answered.

With stdout a terminal, the view is rich's Live on the alternate screen, as htop draws,
and, if stdin is the terminal too, keys are read in cbreak mode (q quits); both are undone
however the view ends, an exception or Ctrl-C included. Anywhere else frames are printed
as plain text, one after another, as `top -b` does; --once prints its one frame as
tacoma status prints (styled in a terminal, plain text elsewhere).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import math
import os
import select
import sys
import termios
import time
import tty
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

import tacoma

from ..wire._briefcase import Briefcase
from ..wire._errors import RemoteProtocolError
from ..wire._names import ADMIN_AGENT
from ._admin import admin_options, admin_token, checked_place, ps_rows
from ._common import USAGE_STATUS, Duration, error_kind, exit_code, hint_for
from ._trust import identity_options

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

    from ..client._place_status import PlaceStatus
    from ..display.top import Answer, NoAnswer

__all__ = ["top"]

#: Seconds the main thread waits at most before it looks again at the samples under way
#: and the keys: a Ctrl-C delivered to another thread gets through (see
#: client._runtime.result_of), and q is answered at once.
WAKE_EVERY = 0.05

#: A sample's outcome: the place's answer, or why there was none, with the exit status
#: of that failure (0 for an answer).
Outcome = tuple["Answer | NoAnswer", int]


@click.command(short_help="Watch places live: meets, rates, worker pools.")
@click.argument("places", nargs=-1, metavar="[PLACE]...")
@click.option("--interval", type=Duration(0.1), default=1.0,
              help="Time between two samples (at least 0.1s: 500ms, 2s). [default: 1s]")
@click.option("--once", is_flag=True,
              help="Print one frame and exit (for scripts).")
@click.option("--iterations", type=click.IntRange(min=1), default=None, metavar="N",
              help="Draw N frames and exit (in a terminal the last stays on the screen).")
@click.option("--timeout", type=Duration(positive=True), default=10.0,
              help="How long a place may take to answer before it is shown down. "
                   "[default: 10s]")
@admin_options
@identity_options
def top(places: tuple[str, ...], interval: float, once: bool, iterations: int | None,
        timeout: float, state_dir: Path | None, token_file: Path | None) -> int:
    """Watch places live: their meets, rates and worker pools, redrawn every --interval.

    PLACE is HOST:PORT (none: $TACOMA_PLACE, else 127.0.0.1:7707; several: a section
    each). Each place is asked what tacoma status PLACE and tacoma ps show, and its section
    says: its version, uptime, pid and load; its meets running, queued and ended, and
    meets ended per second since its previous answer (a dash until there are two); how it
    uses its workers (warm ones kept for the same principal and program, or any program
    of the principal where each meet is a fresh instance; fresh ones); the
    agents running, one row per principal and agent, with how many run in a warm worker
    and how many in a fresh one; and its worker pools, with each pool's meets per second
    (the place counts ended meets per pool, not per principal).

    A place that cannot be reached, or does not answer within --timeout, is shown down
    with the reason, and asked again every interval: its section comes back when it does.

    In a terminal the view takes the screen, as htop does, and gives it back when it
    ends: q quits (exit status 0); Ctrl-C too, with exit status 130, as every tacoma
    command that is interrupted. Not in a terminal (output piped or redirected), each
    frame is printed as plain text, frames one after another, each beginning with its
    "tacoma top" line and a blank line before the next, until --iterations frames or an
    interrupt. --once prints one frame and exits.

    With --once or --iterations, the exit status is 0 if every place answered for the
    last frame, else that of the first place's failure, as tacoma status PLACE exits for
    it (3: nothing listens there, 7: no answer within --timeout, 15: not allowed).

    Like tacoma status, it needs an identity with the admin role (your own is one), or
    the place's admin token (--state-dir, --token-file: a token is one place's, so these
    take one PLACE only). The token is read again at every sample: a place writes a new
    one each time it starts.

    \b
    Examples:
      tacoma top
      tacoma top 127.0.0.1:7707 127.0.0.1:7708 --interval 2
      tacoma top 127.0.0.1:7707 --once
    """
    if once and iterations is not None:
        raise click.UsageError("--once is --iterations 1: give one or the other")
    if len(places) > 1 and (state_dir is not None or token_file is not None):
        raise click.UsageError("--state-dir and --token-file give one place's admin token, "
                               "and it must not be shown to another place: with several "
                               "places, watch them as an identity with the admin role (your "
                               "own is one)")
    chosen = [checked_place(place) for place in places] or [checked_place(None)]
    unique = list(dict.fromkeys(chosen))  # a place named twice is watched once
    for place in unique:  # an unreadable --token-file is a usage error, before any frame
        admin_token(place, state_dir, token_file)
    frames = 1 if once else iterations
    view = _View(unique, interval, timeout,
                 lambda place: admin_token(place, state_dir, token_file))
    return view.run(frames)


class _View:
    """The watched places, their samples under way, and the frames drawn of them."""

    def __init__(self, places: list[str], interval: float, timeout: float,
                 token: Callable[[str], str | None]) -> None:
        from ..display.top import PlaceWatch

        self.interval = interval
        self.timeout = timeout
        self.token = token
        self.watches = [PlaceWatch(place) for place in places]
        self.statuses = dict.fromkeys(places, 0)  # each place's last outcome's exit status
        self.pending: dict[str, concurrent.futures.Future[Outcome]] = {}
        self.keys: _Keys | None = None  # while the view is live in a terminal
        self.tick = time.monotonic()  # when the samples of the last frame were sent

    # ------------------------------------------------------------------ the loop
    def run(self, frames: int | None) -> int:
        """Draw `frames` frames (None: until q or an interrupt); the exit status."""
        from ..display.top import print_frame

        try:
            if sys.stdout.isatty() and frames != 1:
                return self._live(frames, keys=sys.stdin.isatty())
            drawn = 0
            while True:
                last = frames is not None and drawn + 1 == frames
                self._sample(wait_all=last)
                if drawn:
                    sys.stdout.write("\n")
                print_frame(self._frame())
                drawn += 1
                if last:
                    return self._status()
                self._until_next_tick()
        finally:
            for future in self.pending.values():
                future.cancel()

    def _live(self, frames: int | None, *, keys: bool) -> int:
        """The view in a terminal; q is read if `keys` (stdin is the terminal too)."""
        from rich.console import Console
        from rich.live import Live

        from ..display.top import print_frame

        drawn = 0
        with contextlib.ExitStack() as stack:
            if keys:
                self.keys = stack.enter_context(_Keys())
                stack.callback(setattr, self, "keys", None)
            console = Console(file=sys.stdout, highlight=False)
            _fit(console)
            live = stack.enter_context(Live(self._frame(), console=console, screen=True,
                                            auto_refresh=False, redirect_stdout=False,
                                            redirect_stderr=False))
            while frames is None or drawn < frames:
                last = frames is not None and drawn + 1 == frames
                if not self._sample(wait_all=last):
                    return 0  # q
                _fit(console)
                live.update(self._frame(), refresh=True)
                drawn += 1
                if not last and not self._until_next_tick():
                    return 0
        print_frame(self._frame())  # a bounded run leaves its last frame on the screen
        return self._status()

    def _status(self) -> int:
        """The first failing place's exit status for the last frame, or 0."""
        return next((status for status in self.statuses.values() if status), 0)

    def _frame(self) -> RenderableType:
        from ..display.top import frame

        return frame(self.watches, interval=self.interval, now=time.monotonic(),
                     clock=time.time(), keys=self.keys is not None)

    # ------------------------------------------------------------------ sampling
    def _sample(self, *, wait_all: bool) -> bool:
        """Start a sample of every place that has none under way, and take in those that
        end before the tick is over (`wait_all`: all of them); False if q was pressed."""
        from ..client._runtime import background_loop

        loop = background_loop()
        started = self.tick = time.monotonic()
        for watch in self.watches:
            if watch.place in self.pending:
                continue  # still asking: a slow place is not asked twice at once
            try:
                token = self.token(watch.place)
            except click.UsageError as exc:  # its token file went away meanwhile
                watch.observe(_no_answer("UsageError", exc.format_message()), started)
                self.statuses[watch.place] = USAGE_STATUS
                continue
            watch.asked(started)
            self.pending[watch.place] = asyncio.run_coroutine_threadsafe(
                _outcome(watch.place, token, self.timeout), loop)
        until = None if wait_all else started + self.interval
        answered = self._wait(until, lambda: all(f.done() for f in self.pending.values()))
        for watch in self.watches:
            future = self.pending.get(watch.place)
            if future is not None and future.done():
                del self.pending[watch.place]
                outcome, self.statuses[watch.place] = future.result()
                watch.observe(outcome, time.monotonic())
        return answered

    def _until_next_tick(self) -> bool:
        """Wait for the next tick (one interval after this one began); False on q."""
        return self._wait(self.tick + self.interval, lambda: False)

    def _wait(self, until: float | None, ready: Callable[[], bool]) -> bool:
        """Wait until `ready()` or the time.monotonic() `until` (None: no limit),
        reading keys meanwhile; False if q was pressed."""
        while not ready():
            left = WAKE_EVERY if until is None else min(WAKE_EVERY,
                                                        until - time.monotonic())
            if left <= 0:
                return True
            if self.keys is not None:
                if self.keys.quit(left):
                    return False
                continue
            asking = [future for future in self.pending.values() if not future.done()]
            if asking:
                concurrent.futures.wait(asking, timeout=left,
                                        return_when=concurrent.futures.FIRST_COMPLETED)
            else:
                time.sleep(left)  # the time between two ticks: nothing to wait on
        return True


# ---------------------------------------------------------------------------- a sample
def _no_answer(kind: str, message: str, hint: str = "") -> NoAnswer:
    from ..display.top import NoAnswer

    return NoAnswer(kind, message, hint, time.time())


async def _outcome(place: str, token: str | None, timeout: float) -> Outcome:
    """A sample of `place`: its answer, or why there was none (never an exception, but
    for a bug of ours)."""
    try:
        return await _sample(place, token, timeout), 0
    except tacoma.TacomaError as exc:
        return _no_answer(error_kind(exc), str(exc), hint_for(exc, place)), exit_code(exc)


async def _sample(place: str, token: str | None, timeout: float) -> Answer:
    """What `tacoma status PLACE` and `tacoma ps` ask, asked the way they ask it.

    The connection is made first, on its own, in one attempt bounded by `timeout`: the
    meets then find it made. Inside a meet's deadline, a connection still being made when
    the deadline passes would be left to fail unheard (the client shields it for the
    other meets that wait on it); each step here ends by its own timeout instead, with
    the error that says which step it was."""
    from ..client._client import connection, meet_deadline, place_of
    from ..client._place_status import aplace_status

    _, address = await place_of(f"{ADMIN_AGENT}@{place}")
    await connection(address, timeout)
    status = await aplace_status(place, token=token, connect_timeout=timeout,
                                 timeout=timeout)
    # tacoma ps's meet (cli._admin): ag_admin's `ps`, with the same token.
    request = Briefcase(OP=["ps"], TOKEN=[token] if token else [])
    async with meet_deadline(timeout, f"place {address} did not list its agents") as deadline:
        client = await connection(address, timeout, deadline.until)
        listed = await client.meet(ADMIN_AGENT, request, "sync", timeout)
    assert isinstance(listed, Briefcase)
    return _answer(place, status, ps_rows(place, listed.folder("AGENTS")))


def _answer(place: str, status: PlaceStatus, rows: list[dict[str, Any]]) -> Answer:
    """The figures the view needs, checked: PlaceStatus takes the place's numbers as they
    came, and a broken or hostile place gets a protocol error, not a traceback."""
    from ..display.top import AgentRow, Answer, PoolFigures

    try:
        pools = tuple(PoolFigures(
            _text(p.language), _text(p.agent), _count(p.ready), _count(p.size),
            _count(p.most), _count(p.ended), _count(p.misses), _count(p.idle_warm),
            _count(p.warm), _count(p.fresh)) for p in status.pools)
        agents = tuple(AgentRow(
            _text(r.get("principal", "")), _text(r.get("via", "")), r["agent"], r["language"],
            _text(r.get("worker", "fresh")), float(r["age"]), float(r["cpu"]), r["rss"],
            r["name"]) for r in rows)
        reuse = status.reuse
        return Answer(
            version=_text(status.version), pid=_count(status.pid),
            started=_number(status.started), uptime=_number(status.uptime),
            running=_count(status.running), queued=_count(status.queued),
            ended=_count(status.ended), max_meets=_count(status.max_meets),
            max_queued=_count(status.max_queued), reuse=_text(reuse.get("setting", "")),
            reuses=reuse.get("applies") is True, warm_idle=_count(reuse.get("idle", 0)),
            warm_most=_count(reuse.get("most", 0)), load=_number(status.load),
            cpus=_count(status.cpus), pools=pools, agents=agents, at=time.time())
    except (TypeError, ValueError, AttributeError) as exc:
        raise RemoteProtocolError(f"place {place} sent a status tacoma cannot read "
                                  f"({type(exc).__name__}: {exc})") from None


def _count(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{str(value)[:80]!r} is not a count")
    return value


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value):
        raise ValueError(f"{str(value)[:80]!r} is not a number")
    return float(value)


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{str(value)[:80]!r} is not text")
    return value


def _fit(console: Console) -> None:
    """Size the view to the terminal as it is now (it may have been resized): its own size,
    not $COLUMNS and $LINES, which rich would pin the view to, and which a parent that used
    readline (a Python shell, IPython) passes on at the size its terminal had then."""
    with contextlib.suppress(OSError):  # not a terminal after all: rich's own guess
        console.size = os.get_terminal_size(sys.stdout.fileno())


# ---------------------------------------------------------------------------- keys
class _Keys:
    """The terminal's keys, one at a time (cbreak mode: no Enter needed, Ctrl-C still an
    interrupt), for as long as the view is live; the terminal's settings are restored on
    the way out, however the view ends."""

    def __init__(self) -> None:
        self.fd = sys.stdin.fileno()
        self.saved: list[Any] | None = None
        self.ended = False  # end of file: the terminal hung up

    def __enter__(self) -> _Keys:
        self.saved = termios.tcgetattr(self.fd)
        tty.setcbreak(self.fd)
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.saved is not None:
            termios.tcsetattr(self.fd, termios.TCSADRAIN, self.saved)

    def quit(self, seconds: float) -> bool:
        """Wait up to `seconds` for keys: whether q was among them (others are ignored)."""
        if self.ended:  # the terminal is gone: nothing more to read
            time.sleep(seconds)
            return False
        readable, _, _ = select.select([self.fd], [], [], max(0.0, seconds))
        if not readable:
            return False
        try:
            keys = os.read(self.fd, 64)
        except BlockingIOError:
            return False
        self.ended = not keys
        return b"q" in keys.lower()

