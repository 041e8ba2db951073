"""Progress of long work (`tacoma bench`, waiting for many async meets), in a terminal and
in a notebook alike.

Where a progress shows is decided once, when the work starts (`where`):

- in a notebook (code running in an IPython kernel): one HTML bar in the cell's output,
  redrawn in place through a display id (IPython's `update_display`), at most a few times
  a second. rich's own notebook progress needs ipywidgets, which tacoma does not depend
  on; a display id is the kernel protocol's own way to update an output.
- in a terminal (the file, stderr by default, is a tty): rich's progress bar, with notes
  printed above it.
- anywhere else (a pipe, a log file, a test): nothing, unless asked (`show=True`): then
  each new description and each note, one a line, and a last line with the count, for logs
  (`tacoma bench` asks, so that its progress shows in CI logs).

Nothing of rich or IPython is imported before a progress is shown there. Descriptions and
notes are escaped when given (wire._text.escape): they carry what places and agents said (a
trip's last stop, a failed meet's error), shown, not acted on, wherever they show.
"""

from __future__ import annotations

import html
import sys
import threading
import time
from types import TracebackType
from typing import IO, Any, Literal

from ..wire._text import escape

__all__ = ["Progress", "in_notebook", "where"]

Where = Literal["notebook", "terminal", "lines", "off"]

#: Seconds between two redraws of a notebook bar: each is a message to the notebook, and
#: thousands of them would make its file and its browser tab slow.
NOTEBOOK_REDRAW_SECONDS = 0.2
#: Notes kept under a notebook bar (the latest ones; a terminal scrolls them instead).
NOTEBOOK_NOTES = 3


def in_notebook() -> bool:
    """Whether this code runs in an IPython kernel (Jupyter, JupyterLab, VS Code, Colab).

    Looks only at an IPython already imported: finding out must never import it.
    """
    ipython = sys.modules.get("IPython")
    get_ipython = getattr(ipython, "get_ipython", None)
    shell = get_ipython() if get_ipython is not None else None
    return shell is not None and getattr(shell, "kernel", None) is not None


def where(file: IO[str] | None = None, show: bool | None = None) -> Where:
    """Where a progress on `file` (None: stderr, or the notebook's cell) shows: see the
    module's header. `show`: None decides by the output, False never shows, True also
    writes lines where there is neither a terminal nor a notebook."""
    if show is False:
        return "off"
    if file is None and in_notebook():
        return "notebook"
    out = file or sys.stderr
    isatty = getattr(out, "isatty", None)
    if isatty is not None and isatty():
        return "terminal"
    return "lines" if show else "off"


def human_duration(seconds: float) -> str:
    """Seconds for a person: 4.2s, 3m 5s, 2h 10m, 3d 4h."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m {secs}s"


class Progress:
    """A count of work done out of `total` (None: unknown), with a description and notes.

        with Progress(len(ids), "meets") as progress:
            for ...:
                progress.advance()
                progress.note("meet 3 failed: ...")

    Safe to call from several threads; a progress that does not show costs nothing more
    than its calls.
    """

    def __init__(self, total: float | None, description: str = "", *,
                 file: IO[str] | None = None, show: bool | None = None,
                 started: float | None = None, count: bool = True) -> None:
        """`started`: when the work began (time.monotonic()), if before the progress is
        shown: the time shown counts from it. `count`: show the count done ("3/10"); a
        progress whose units are not the work's (a trip's hops) shows only its bar."""
        self.total = total
        self.count = count
        self._began = started
        self.completed = 0.0
        self.description = escape(description)
        self.title = self.description  # what the final state says, whatever step came last
        self.notes: list[str] = []
        self.where = where(file, show)
        self._file = file or sys.stderr
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._drawn = 0.0  # when the notebook bar was last redrawn
        self._rich: Any = None  # rich.progress.Progress, in a terminal
        self._task: Any = None
        self._handle: Any = None  # IPython's DisplayHandle, in a notebook

    # -- the work's side
    def __enter__(self) -> Progress:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        """Show the progress (a `with` block does this)."""
        self._started = self._began if self._began is not None else time.monotonic()
        if self.where == "terminal":
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            # markup=False: a description names places, and "[::1]:7707" is no rich markup
            columns = [TextColumn("{task.description}", markup=False), BarColumn()]
            if self.total is not None and self.count:
                columns.append(MofNCompleteColumn())
            columns.append(TimeElapsedColumn())
            self._rich = Progress(*columns, console=Console(file=self._file),
                                  transient=False)
            self._task = self._rich.add_task(self.description, total=self.total)
            # The time shown counts from when the work began (rich's clock is monotonic).
            self._rich.tasks[-1].start_time = self._started
            self._rich.start()
        elif self.where == "notebook":
            from IPython.display import display

            # IPython ships no type information: the handle is its DisplayHandle.
            self._handle = display(self._bundle(), raw=True,  # type: ignore[no-untyped-call]
                                   display_id=True)
            self._drawn = time.monotonic()

    def advance(self, amount: float = 1.0) -> None:
        """Count `amount` more work done."""
        with self._lock:
            self.completed += amount
        self._changed()

    def update(self, *, completed: float | None = None, total: float | None = None,
               description: str | None = None) -> None:
        """Set the count done, the total or the description (the step under way: a log
        gets each new one as a line)."""
        if description is not None:
            description = escape(description)  # it may name what a place said (a trip's stop)
        with self._lock:
            begun = description is not None and description != self.description
            if completed is not None:
                self.completed = completed
            if total is not None:
                self.total = total
            if description is not None:
                self.description = description
        if begun and self.where == "lines":
            print(description, file=self._file, flush=True)
        self._changed()

    def note(self, line: str) -> None:
        """A line about the work (a step begun, a failure): above the bar in a terminal,
        under it in a notebook, a line of its own in a log."""
        line = escape(line)  # a failed meet's note carries its error, which is the agent's
        with self._lock:
            self.notes = [*self.notes, line][-NOTEBOOK_NOTES:]
        if self.where == "terminal":
            self._rich.console.print(line, markup=False, highlight=False, soft_wrap=True)
        elif self.where == "lines":
            print(line, file=self._file, flush=True)
        elif self.where == "notebook":
            self._redraw(force=True)

    def stop(self) -> None:
        """Show the final state and stop redrawing (a `with` block does this)."""
        self.description = self.title
        if self.where == "terminal" and self._rich is not None:
            self._changed()
            self._rich.stop()
        elif self.where == "notebook":
            self._redraw(force=True)
        elif self.where == "lines":
            print(self.summary(), file=self._file, flush=True)

    # -- what is shown
    def summary(self) -> str:
        """One line: the description, the count and the time so far."""
        took = human_duration(time.monotonic() - self._started)
        if not self.count:
            return f"{self.description}, {took}".lstrip(", ")
        count = (f"{self.completed:,.0f} of {self.total:,.0f}" if self.total is not None
                 else f"{self.completed:,.0f}")
        return f"{self.description}: {count} done, {took}".lstrip(": ")

    def _repr_html_(self) -> str:
        fraction = (min(1.0, self.completed / self.total) if self.total else None)
        bar = (f"<progress value='{fraction:.4f}' max='1' style='width:20em'></progress>"
               if fraction is not None else "<progress style='width:20em'></progress>")
        notes = "".join(f"<div style='color:#666'>{html.escape(n)}</div>" for n in self.notes)
        return (f"<div style='font-family:monospace'>{bar} "
                f"{html.escape(self.summary())}{notes}</div>")

    def _bundle(self) -> dict[str, str]:
        text = "\n".join([self.summary(), *self.notes])
        return {"text/plain": text, "text/html": self._repr_html_()}

    def _changed(self) -> None:
        if self.where == "terminal":
            self._rich.update(self._task, completed=self.completed, total=self.total,
                              description=self.description)
        elif self.where == "notebook":
            self._redraw(force=self.total is not None and self.completed >= self.total)

    def _redraw(self, *, force: bool) -> None:
        now = time.monotonic()
        if self._handle is None or (not force and now - self._drawn < NOTEBOOK_REDRAW_SECONDS):
            return
        self._drawn = now
        self._handle.update(self._bundle(), raw=True)
