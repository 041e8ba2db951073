"""Memory a process has freed, given back to the system: glibc's malloc_trim, on a thread.

glibc keeps freed memory for the process's next allocations: after a burst of TLS
connections (each with buffers of its own) or a frame of tens of megabytes, a place that
had freed the memory stayed as large as at the peak. (A connection's objects are freed as
it ends, see _channel.Channel.connection_lost, so that there is memory to hand back.) A
trim hands the free pages back; it walks the heap, so it runs on a thread, TRIM_SECONDS
after it is first asked for since the last one: what is freed meanwhile (the rest of a
burst of closes) is taken by that one, and what is freed after it asks for the next.

One `trim` for the process: the heap is the process's, whichever connection freed it.
Elsewhere than glibc it does nothing (other C libraries have no malloc_trim), and a
process that never lets go of a large frame or a connection never loads ctypes for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable

__all__ = ["TRIM_SECONDS", "Trim", "trim"]

#: The memory freed once a large frame is let go of, or connections have closed, is given
#: back to the system this long after (at most this often: a burst of closes, one trim).
TRIM_SECONDS = 1.0


class Trim:
    """Asks glibc to give back what the process freed: at most once every TRIM_SECONDS."""

    def __init__(self) -> None:
        self._function: Callable[[int], int] | None = None
        self._looked = False
        self._scheduled: asyncio.AbstractEventLoop | None = None

    def after_large(self, loop: asyncio.AbstractEventLoop) -> None:
        """A large frame was let go of (decoded, written, or dropped unfinished)."""
        self._ask(loop)

    def after_close(self, loop: asyncio.AbstractEventLoop) -> None:
        """A connection ended (its buffers, and for TLS its session's, are freed)."""
        self._ask(loop)

    def _ask(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._scheduled is not None and not self._scheduled.is_closed():
            return  # one is coming; it will take this too
        if self._trim() is None:
            return
        self._scheduled = loop
        loop.call_later(TRIM_SECONDS, self._run, loop)

    def _run(self, loop: asyncio.AbstractEventLoop) -> None:
        self._scheduled = None
        trim = self._trim()
        if trim is not None:
            with contextlib.suppress(RuntimeError):  # the loop is shutting its executor down
                loop.run_in_executor(None, trim, 0)

    def _trim(self) -> Callable[[int], int] | None:
        if not self._looked:
            self._looked = True
            self._function = _malloc_trim()
        return self._function


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, or None where the C library is another (it has none)."""
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return None
    except (ValueError, OSError):  # not glibc: the name is unknown here
        return None
    import ctypes  # only here: a client that never trims does not load it

    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    function: Callable[[int], int] = trim
    return function


#: The process's one.
trim = Trim()
