"""What a notebook shows of tacoma's values and errors, escaped.

A briefcase, a meet's status, a place's status and a traced meet carry what agents and
places said: folder names and text, errors and tracebacks, places' addresses and steps.
Their own views (`repr`, `_repr_html_`, an error's `_render_traceback_`) say it as it came,
and whatever it holds would reach the reader: in IPython in a terminal, ESC, BEL and CR act
on the terminal (a title change, a clipboard write with OSC 52, a cleared screen); in a
browser a bidi override (U+202E) turns the text after it around. These functions take a
value's own view and escape it (wire._text.escape: control and format characters shown as
`\\x1b`, `\\u202e`), keeping its layout; `register` makes them IPython's way to show
tacoma's values (its display formatters, looked up before a value's own methods).

An error is the exception itself, raised through IPython, which asks it for its lines
(`_render_traceback_`): the `%%meet` magic gives the errors it raises `error_lines` as
theirs (`safe_error`), so that the cell's error shows escaped and stays the same exception
(its type, its fields) for the code that catches it.

Nothing here fetches a lazy folder: the values' views show a lazy folder by its reference.
"""

from __future__ import annotations

import functools
from typing import Any

from ..client._place_status import PlaceStatus
from ..client._status import MeetStatus
from ..client._traced import Traced
from ..wire._briefcase import Briefcase
from ..wire._errors import TacomaError
from ..wire._text import escape

__all__ = ["SHOWN_TYPES", "error_lines", "html_view", "register", "safe_error", "text_view"]

#: The values whose views carry what a peer said.
SHOWN_TYPES: tuple[type, ...] = (Briefcase, MeetStatus, PlaceStatus, Traced)


def text_view(value: object) -> str:
    """`value`'s text (its repr), escaped: what IPython prints as its text/plain."""
    return escape(repr(value), newlines=True)


def html_view(value: Any) -> str:
    """`value`'s HTML (`_repr_html_`), its control and format characters escaped: its
    markup is tacoma's own, printable, and escaping leaves it as it is."""
    shown: str = value._repr_html_()
    return escape(shown, newlines=True)


def error_lines(error: TacomaError) -> list[str]:
    """The lines IPython shows for a tacoma error (its class's `_render_traceback_`: the
    caller's frames, the error, the far side's traceback), each escaped: the error line
    stays one line, whatever newline the agent put in its message."""
    return [escape(line) for line in type(error)._render_traceback_(error)]


def safe_error(error: TacomaError) -> TacomaError:
    """`error`, which IPython will now show through `error_lines` (at the time it shows it,
    with the frames the error passed through by then)."""
    # An attribute of this one exception, not a change to the class: tacoma.meet called
    # from any other code keeps the class's own view.
    error._render_traceback_ = functools.partial(error_lines, error)  # type: ignore[method-assign]
    return error


def _pretty(value: object, printer: Any, cycle: bool) -> None:
    printer.text(text_view(value))


def register(ipython: Any) -> None:
    """Make the escaped views IPython's text/plain and text/html of tacoma's values."""
    formatters = ipython.display_formatter.formatters
    for kind in SHOWN_TYPES:
        formatters["text/plain"].for_type(kind, _pretty)
        formatters["text/html"].for_type(kind, html_view)
