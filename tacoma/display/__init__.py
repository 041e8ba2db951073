"""How tacoma shows things to a person: tables, in a terminal and in a notebook alike.

Every table tacoma prints (ps, trust show, doctor, status, bench) goes through `table`, so
that they look alike: a header row, columns aligned, no box lines (a terminal's output is
also read by scripts and tests, which split on whitespace), and the same table as HTML
where a notebook shows it. rich does the layout (the ecosystem's choice for tables and
progress, see `tacoma.display.progress`); without a terminal the width is not cut to 80
columns, so that a piped table never wraps a row.

A cell may be anybody's text (an agent's name, a place's error, a resident's name), so
every cell, note and HTML cell is escaped (wire._text.escape): what would make a terminal
act (ESC, BEL, a carriage return) or turn text around (a bidi override) is shown, not done.
"""

from __future__ import annotations

import html
import sys
from collections.abc import Iterable, Sequence
from typing import IO, Any

from ..wire._text import escape
from .progress import Progress as Progress
from .progress import human_duration as human_duration

__all__ = ["Progress", "console", "grid", "html_table", "html_text", "human_duration",
           "human_size", "show", "table"]


def console(file: IO[str] | None = None) -> Any:
    """A rich Console on `file` (stdout): a terminal's own width, or unbounded when piped."""
    from rich.console import Console

    out = file or sys.stdout
    wide = None if out.isatty() else 10_000
    return Console(file=out, width=wide, highlight=False, soft_wrap=False)


def grid(headers: Sequence[str], rows: Iterable[Sequence[Any]], *,
         title: str | None = None, right: Sequence[str] = ()) -> Any:
    """The rich Table every table of tacoma's is (no box lines, bold headers), every cell
    escaped; columns named in `right` are right-aligned (numbers)."""
    from rich.table import Table
    from rich.text import Text

    drawn = Table(box=None, show_edge=False, pad_edge=False, title=title,
                  title_justify="left", header_style="bold", padding=(0, 2, 0, 0))
    for name in headers:
        drawn.add_column(name, justify="right" if name in right else "left", no_wrap=True)
    for row in rows:
        # Text, not str: rich would read "[bold]" in an agent's name or error as markup.
        # Escaped: rich strips a few control characters, but passes ESC and bidi overrides.
        drawn.add_row(*(Text(escape(str(cell))) for cell in row))
    return drawn


def show(renderable: Any, out: Any = None) -> None:
    """Print a rich renderable on the Console `out` (`console()`): in a terminal as rich
    draws it; piped, with no padding after a line's last character, for scripts and
    diffs."""
    out = out if out is not None else console()
    if out.is_terminal:
        out.print(renderable)
        return
    with out.capture() as captured:
        out.print(renderable)
    out.file.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))
    out.file.flush()


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *,
          title: str | None = None, notes: Sequence[str] = (),
          right: Sequence[str] = (), file: IO[str] | None = None) -> None:
    """Print rows under headers; columns named in `right` are right-aligned (numbers);
    `notes` are lines printed under the table (where its figures come from)."""
    from rich.measure import Measurement
    from rich.text import Text

    drawn = grid(headers, rows, title=title, right=right)
    out = console(file)
    # A terminal narrower than the table gets its rows wrapped by the terminal, rather than
    # figures cut short by rich.
    out.width = max(out.width, Measurement.get(out, out.options, drawn).maximum)
    show(drawn, out)
    for note in notes:
        out.print(Text(escape(note)), soft_wrap=True)


def html_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *,
               caption: str | None = None) -> str:
    """The same table as HTML, for a notebook's `_repr_html_`; every cell is escaped, for
    HTML and for the reader (`html_text`)."""
    head = "".join(f"<th style='text-align:left'>{html_text(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td style='text-align:left'>{html_text(c)}</td>"
                                    for c in row) + "</tr>" for row in rows)
    cap = f"<caption style='text-align:left'>{html_text(caption)}</caption>" if caption else ""
    return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def html_text(value: object) -> str:
    """`value` as text in HTML: its markup escaped (html.escape), and its control and
    format characters shown as escapes too, which html.escape leaves in. A browser ignores
    ESC, but a bidi override (U+202E) would turn the text after it around on the page."""
    return html.escape(escape(str(value), newlines=True))


def human_size(size: int) -> str:
    """Bytes for a person: 512 B, 1.5 KiB, 64 MiB."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            text = f"{value:.1f}".removesuffix(".0") if unit != "B" else str(size)
            return f"{text} {unit}"
        value /= 1024
    raise AssertionError("not reached")
