"""The seccomp filter every agent process loads last: system calls an agent never needs.

Built once per place, here, with libseccomp, and handed to each worker as the BPF program
libseccomp exports; the worker loads it with one prctl (`agent._sandbox`), so agent
processes import nothing for it. libseccomp because it is what bubblewrap, systemd and the
container runtimes use: it knows every architecture's system call numbers, checks the
architecture the call came from (a 32-bit call on a 64-bit kernel cannot slip past), and
compiles the rules into a sound filter, the parts that are easy to get wrong by hand. Its
Python binding is pyseccomp, a pure ctypes binding with the same API as libseccomp's own
(which is not on PyPI): it needs only the library every Debian has (libseccomp2).

A refused call fails with EPERM, never a kill, so an agent gets an error it can report.
clone3 fails with ENOSYS instead: its flags are in memory a filter cannot read, so the C
library falls back to clone, whose flags it can check (what container runtimes do).
"""

from __future__ import annotations

import errno
import functools
import tempfile

__all__ = ["DENIED", "NAMESPACE_FLAGS", "build", "problem"]

#: System calls refused to agents: debugging other processes, changing the file system's
#: shape or the namespaces, the kernel's key store, BPF, performance counters, userfaultfd
#: and io_uring (both favourite kernel exploit tools), loading kernels or modules, and the
#: administration of the machine; and the legacy ones of the same kinds.
DENIED = (
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    "mount", "umount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree",
    "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr", "open_tree_attr",
    "unshare", "setns",
    "keyctl", "add_key", "request_key",
    "bpf", "perf_event_open", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "reboot", "swapon", "swapoff", "acct", "syslog", "quotactl", "quotactl_fd",
    "name_to_handle_at", "open_by_handle_at", "lookup_dcookie", "nfsservctl",
    "iopl", "ioperm", "vhangup", "settimeofday", "clock_settime", "clock_adjtime",
    "adjtimex", "sethostname", "setdomainname", "personality", "uselib", "ustat", "sysfs",
    "_sysctl", "fanotify_init",
)
#: clone flags that make namespaces; a clone with any of them is refused.
NAMESPACE_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000,
                   0x20000000, 0x40000000, 0x00000080)  # NS UTS IPC USER PID NET CGROUP TIME
_AF_UNIX = 1


@functools.cache
def _library() -> object:
    import pyseccomp

    return pyseccomp


def problem() -> str | None:
    """Why no filter can be built here, or None."""
    try:
        _library()
    except (ImportError, OSError) as exc:
        return (f"libseccomp is not usable ({exc}); install libseccomp2 (Debian: apt-get "
                "install libseccomp2) and pyseccomp")
    return None


@functools.cache
def build(unix_sockets: bool = False) -> bytes:
    """The filter as a BPF program (struct sock_filter[]); OSError if it cannot be built.

    unix_sockets: allow socket(AF_UNIX) (socketpair is always allowed). Refused by default:
    an agent's only channel is the one its place handed it, and a Unix socket is how it
    would reach a service on the host's file system that the network namespace does not
    cover.
    """
    seccomp = _library()
    f = seccomp.SyscallFilter(seccomp.ALLOW)  # type: ignore[attr-defined]
    eperm = seccomp.ERRNO(errno.EPERM)  # type: ignore[attr-defined]
    for name in DENIED:
        try:
            f.add_rule(eperm, name)
        except (OSError, ValueError, RuntimeError):
            continue  # a call this architecture or libseccomp does not know
    for flag in NAMESPACE_FLAGS:
        f.add_rule(eperm, "clone",
                   seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))  # type: ignore[attr-defined]
    f.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")  # type: ignore[attr-defined]
    if not unix_sockets:
        f.add_rule(eperm, "socket",
                   seccomp.Arg(0, seccomp.EQ, _AF_UNIX))  # type: ignore[attr-defined]
    with tempfile.TemporaryFile() as out:
        f.export_bpf(out)
        out.seek(0)
        program = out.read()
    if not program or len(program) % 8:
        raise OSError("libseccomp exported no filter")
    return program


def describe() -> str:
    """One line for the place's log and tacoma doctor."""
    return (f"{len(DENIED)} system calls, namespace-making clones, clone3 and Unix "
            "sockets refused")

