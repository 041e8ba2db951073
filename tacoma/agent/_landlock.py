"""Landlock: what an agent process may open, where it may connect, whom it may signal.

Landlock is the kernel's unprivileged access control: a process builds a ruleset (the kinds
of access it wants to control, and for each directory the kinds it still allows beneath it)
and restricts itself to it, irreversibly, for itself and everything it starts. It needs no
root, composes with the mount namespace (a rule follows the inode, not the path), and
survives the exec of a C agent.

Written here with ctypes on the three system calls because the standard library has no
binding and the packages that wrap them (landlock on PyPI) are thin and young: the kernel's
interface is three calls and three small structs, all below (include/uapi/linux/landlock.h).
Standard library only: this runs inside agent processes.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import stat

from ._libc import error
from ._libc import libc as _libc

__all__ = ["abi_version", "restrict", "restrict_self", "ruleset"]

# System call numbers are the same on every architecture (added after the unified table).
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH, _RULE_NET_PORT = 1, 2

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK = 1 << 8, 1 << 9, 1 << 10, 1 << 11
MAKE_SYM, REFER, TRUNCATE, IOCTL_DEV = 1 << 12, 1 << 13, 1 << 14, 1 << 15
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1

#: File accesses each ABI version knows (a newer kernel refuses none of an older ABI's).
_FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1,
              5: (1 << 16) - 1}
#: What may be done to a file (not a directory) itself; a rule on a file allows only these.
_FILE_ONLY = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV

READ = READ_FILE | READ_DIR
RUN = READ | EXECUTE
#: Everything within a directory of the agent's own, but running what it wrote there.
WRITE = (READ | WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_DIR | MAKE_REG | MAKE_SOCK
         | MAKE_FIFO | MAKE_SYM | REFER | TRUNCATE)
#: A device file such as /dev/null: read, write, and its ioctls.
DEVICE = READ_FILE | WRITE_FILE | IOCTL_DEV



class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64),
                ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def abi_version() -> int:
    """The Landlock ABI this kernel offers; 0 if none (too old, or disabled at boot)."""
    version = _libc.syscall(_CREATE_RULESET, None, ctypes.c_size_t(0),
                            ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(0, int(version))



def ruleset(rules: list[tuple[str, int]], deny_tcp: bool, scope: bool) -> int:
    """A ruleset allowing `rules`, pairs of a path and the accesses allowed beneath it
    (every file access not allowed by a rule is refused), as a descriptor to restrict
    processes with (`restrict_self`): a zygote makes it once for all its workers.

    `deny_tcp`: refuse every TCP bind and connect (ABI 4); `scope`: refuse signals to, and
    abstract Unix sockets of, processes outside the restricted process's own domain (ABI
    6). A rule binds the inode its path names now, and applies to whatever is later mounted
    on or below it. Paths that do not exist are skipped. Raises OSError if the kernel has
    no Landlock.
    """
    abi = abi_version()
    if abi < 1:
        raise OSError("landlock: this kernel offers no Landlock (too old, or not enabled "
                      "with lsm=...,landlock at boot)")
    handled = _FS_BY_ABI.get(abi, _FS_BY_ABI[5])
    attr = _RulesetAttr(handled, 0, 0)
    size = ctypes.sizeof(_RulesetAttr)
    if abi < 6:
        size = 16  # the scoped field came with ABI 6
    if abi < 4:
        size = 8  # and the network field with ABI 4
    if deny_tcp and abi >= 4:
        attr.handled_access_net = NET_BIND_TCP | NET_CONNECT_TCP  # and no rule allows any
    if scope and abi >= 6:
        attr.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
    fd = int(_libc.syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size),
                           ctypes.c_uint32(0)))
    if fd < 0:
        raise error("landlock create_ruleset")
    try:
        for path, access in rules:
            try:
                target = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                if not stat.S_ISDIR(os.fstat(target).st_mode):
                    access &= _FILE_ONLY
                rule = _PathBeneathAttr(access & handled, target)
                if _libc.syscall(_ADD_RULE, fd, _RULE_PATH_BENEATH, ctypes.byref(rule),
                                 ctypes.c_uint32(0)) != 0:
                    raise error(f"landlock add_rule {path}")
            finally:
                os.close(target)
    except BaseException:
        os.close(fd)
        raise
    return fd


def restrict_self(fd: int) -> None:
    """Restrict this process (and all it starts) to the ruleset `fd`, for good. The caller
    must have set no_new_privs, or be root."""
    if _libc.syscall(_RESTRICT_SELF, fd, ctypes.c_uint32(0)) != 0:
        raise error("landlock restrict_self")


def restrict(rules: list[tuple[str, int]], deny_tcp: bool, scope: bool) -> None:
    """`ruleset` and `restrict_self` in one go."""
    fd = ruleset(rules, deny_tcp, scope)
    try:
        restrict_self(fd)
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
