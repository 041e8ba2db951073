"""How tacoma shows things to a person: tables, in a terminal and in a notebook alike.

Every table tacoma prints (ps, trust show, doctor, status, bench) goes through `table`, so
that they look alike: a header row, columns aligned, no box lines (a terminal's output is
also read by scripts and tests, which split on whitespace), and the same table as HTML
where a notebook shows it. rich does the layout (the ecosystem's choice for tables and
progress, see `tacoma.display.progress`); without a terminal the width is not cut to 80
columns, so that a piped table never wraps a row.
"""

from __future__ import annotations

import html
import sys
from collections.abc import Iterable, Sequence
from typing import IO, Any

from .progress import Progress as Progress
from .progress import human_duration as human_duration

__all__ = ["Progress", "console", "html_table", "human_duration", "human_size", "table"]


def console(file: IO[str] | None = None) -> Any:
    """A rich Console on `file` (stdout): a terminal's own width, or unbounded when piped."""
    from rich.console import Console

    out = file or sys.stdout
    wide = None if out.isatty() else 10_000
    return Console(file=out, width=wide, highlight=False, soft_wrap=False)


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *,
          title: str | None = None, notes: Sequence[str] = (),
          right: Sequence[str] = (), file: IO[str] | None = None) -> None:
    """Print rows under headers; columns named in `right` are right-aligned (numbers);
    `notes` are lines printed under the table (where its figures come from)."""
    from rich.table import Table
    from rich.text import Text

    grid = Table(box=None, show_edge=False, pad_edge=False, title=title, title_justify="left",
                 header_style="bold", padding=(0, 2, 0, 0))
    for name in headers:
        grid.add_column(name, justify="right" if name in right else "left", no_wrap=True)
    for row in rows:
        # Text, not str: rich would read "[bold]" in an agent's name or error as markup.
        grid.add_row(*(Text(str(cell)) for cell in row))
    out = console(file)
    # A terminal narrower than the table gets its rows wrapped by the terminal, rather than
    # figures cut short by rich.
    from rich.measure import Measurement

    out.width = max(out.width, Measurement.get(out, out.options, grid).maximum)
    if out.is_terminal:
        out.print(grid)
    else:  # piped: no padding after a row's last cell, for scripts and diffs
        with out.capture() as captured:
            out.print(grid)
        out.file.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))
    for note in notes:
        out.print(Text(note), soft_wrap=True)


def html_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *,
               caption: str | None = None) -> str:
    """The same table as HTML, for a notebook's `_repr_html_`; every cell is escaped."""
    head = "".join(f"<th style='text-align:left'>{html.escape(str(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td style='text-align:left'>{html.escape(str(c))}</td>"
                                    for c in row) + "</tr>" for row in rows)
    cap = f"<caption style='text-align:left'>{html.escape(caption)}</caption>" if caption else ""
    return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def human_size(size: int) -> str:
    """Bytes for a person: 512 B, 1.5 KiB, 64 MiB."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            text = f"{value:.1f}".removesuffix(".0") if unit != "B" else str(size)
            return f"{text} {unit}"
        value /= 1024
    raise AssertionError("not reached")
