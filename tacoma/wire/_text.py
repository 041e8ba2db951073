"""Text from a peer, made safe to show: escaped for a terminal, bounded for a log.

Whatever an agent or another place says (an error, a folder, a resident's name, a trip id)
may reach a person's terminal or the place's log. Raw, it could carry escape sequences (a
title change, a clipboard write with OSC 52, a cleared screen), lines that look like the
place's own, or megabytes. `escape` turns every character a terminal would act on into
its visible escape (`\\x1b`, `\\u202e`), as `repr` would, but leaves the rest as it is;
`shown` also quotes and cuts a value for one log line. The standard library has the
pieces (`str.isprintable`, `repr`) but not this pair: `repr` escapes every non-ASCII
letter of a name in Python 3's `ascii()` and quotes in ways a log reader does not need.

Standard library only: every side imports this (the place's log, the CLI, the notebook).
"""

from __future__ import annotations

import logging
import unicodedata

__all__ = ["LOG_LINE", "LOG_VALUE", "SafeFormatter", "escape", "shown"]

#: Characters of one peer-supplied value that a log line shows; the rest is counted.
LOG_VALUE = 200
#: Characters of one log message at most (its traceback apart), whatever it holds.
LOG_LINE = 8192


_NAMED = {"\n": "\\n", "\r": "\\r"}


def _visible(char: str) -> str:
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _safe(char: str, newlines: bool) -> bool:
    if char == "\n":
        return newlines
    if char == "\t":
        return True
    if char == "\\":
        return True
    # Control (Cc: C0, DEL, C1), format (Cf: bidi overrides, zero-width joiners), line and
    # paragraph separators, surrogates and unassigned code points: all shown escaped.
    return unicodedata.category(char)[0] not in "CZ" or char == " "


def escape(text: str, *, newlines: bool = False) -> str:
    """`text` with every character a terminal would act on shown as its escape (`\\x1b`,
    `\\r`, `\\u202e`); newlines kept if `newlines` (a traceback, a folder's lines)."""
    if text.isprintable() and (newlines or "\n" not in text):
        return text  # the common case: nothing to do, and no copy
    return "".join(c if _safe(c, newlines) else _visible(c) for c in text)


def shown(value: object, limit: int = LOG_VALUE) -> str:
    """A peer-supplied value for one log line: escaped, in quotes, and cut to `limit`
    characters with the length said ("'abc...' (4,194,304 characters)")."""
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    if len(text) > limit:
        return f"'{escape(text[:limit])}...' ({len(text):,} characters)"
    return f"'{escape(text)}'"


class SafeFormatter(logging.Formatter):
    """A log formatter for a place: every message escaped (one line, whatever a peer put
    in it) and cut at LOG_LINE characters; a traceback keeps its lines, escaped. The
    backstop behind `shown` at the call sites: a value a call site forgot to bound still
    cannot forge a line, drive the terminal, or fill the disk."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        text = escape(super().formatMessage(record))
        if len(text) > LOG_LINE:
            text = f"{text[:LOG_LINE]}... ({len(text):,} characters)"
        return text

    def formatException(self, ei: object) -> str:
        return escape(super().formatException(ei), newlines=True)  # type: ignore[arg-type]
