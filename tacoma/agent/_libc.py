"""The C library, through ctypes: one handle and one error check for the sandbox's system
calls (`_sandbox`, `_mounts`, `_landlock`). The standard library wraps none of these
(prctl, unshare, setns, mount, the Landlock and seccomp calls) in Python 3.11.

Standard library only: this runs inside agent processes.
"""

from __future__ import annotations

import ctypes
import os

__all__ = ["check", "error", "libc"]

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def error(what: str) -> OSError:
    """The OSError for the C call `what` that just failed (from errno)."""
    err = ctypes.get_errno()
    return OSError(err, f"{what}: {os.strerror(err)}")


def check(result: int, what: str) -> None:
    """Raise `error(what)` unless a C call returned 0."""
    if result != 0:
        raise error(what)
