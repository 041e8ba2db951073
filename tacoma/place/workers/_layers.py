"""Which layers of the sandbox this host lets a place apply, and why not the others.

Probed once when a place starts (and by `tacoma doctor`) by trying each for real: Landlock's
ABI from the kernel, the seccomp filter built, the namespaces unshared in a throwaway
process, the cgroup controllers found (and, for a place, its groups made). The place then
plans exactly these layers for every agent (`_containment`), and a worker that cannot apply
a planned layer does not start: what the log and doctor say is what agents get.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field

from ...agent import _landlock
from . import _seccomp
from ._cgroups import CONTROLLERS, Cgroups, find_controllers

__all__ = ["Layer", "Layers", "probe"]

# Unshares the namespaces, then makes / private in the new mount namespace, as every
# zygote does first (agent._mounts.prepare_view): that fails where / is not a mount point
# (a chroot), and then the mount layer cannot be applied though the unshare worked.
_PROBE = """
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
flags = int(sys.argv[1])
ok = libc.unshare(flags) == 0
error = "" if ok else os.strerror(ctypes.get_errno())
mount = error
if ok:
    mount = "" if libc.mount(None, b"/", None, 16384 | 262144, None) == 0 else (
        "cannot make / private (mount --make-rprivate /): "
        + os.strerror(ctypes.get_errno()) + "; / is not a mount point here (a chroot?): "
        "bind-mount the root onto itself (mount --bind / /) before starting the place")
print(json.dumps({"ok": ok, "error": error, "mount": mount}))
"""
_CLONE_NEWNS, _CLONE_NEWPID, _CLONE_NEWNET, _CLONE_NEWUSER = (
    0x00020000, 0x20000000, 0x40000000, 0x10000000)


@dataclass(frozen=True)
class Layer:
    name: str
    applied: bool
    detail: str


@dataclass
class Layers:
    """What a place applies to its agents here."""

    uids: bool
    userns: bool  # without root: workers in a user namespace of the zygote's
    mounts: bool
    pidns: bool
    netns: bool
    landlock_abi: int
    seccomp: bytes | None
    cgroups: Cgroups | None
    report: list[Layer] = field(default_factory=list)


def _can_unshare(flags: int) -> tuple[str, str]:
    """Whether a process of this user can unshare these namespaces here, and then make its
    view of / private: ("", "") if so, else why not (each)."""
    try:
        out = subprocess.run([sys.executable, "-I", "-S", "-c", _PROBE, str(flags)],  # noqa: S603 - our own probe
                             capture_output=True, text=True, timeout=30, check=False)
        answer = json.loads(out.stdout)
    except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
        return f"cannot probe: {exc}", f"cannot probe: {exc}"
    return str(answer["error"]), str(answer["mount"])


def probe(separate_uids: bool = True, network: str = "none", create: bool = True,
          unix_sockets: bool = False) -> Layers:
    """Try each layer here. `create`: make the place's cgroups (a place; doctor only looks)."""
    root = os.geteuid() == 0
    report: list[Layer] = []

    uids = root and separate_uids
    report.append(Layer("uid per agent", uids,
                        "a uid and gid of its own from a host-wide block" if uids
                        else "needs root" if not root
                        else "off (--same-uid): agents run as root, without capabilities"))

    if root:
        why, mount_why = _can_unshare(_CLONE_NEWNS | _CLONE_NEWPID | _CLONE_NEWNET)
        userns = False
        pidns = netns = not why
    else:
        why, mount_why = _can_unshare(_CLONE_NEWUSER | _CLONE_NEWNS | _CLONE_NEWNET)
        userns = netns = not why
        pidns = False
    mounts = not mount_why
    if userns:
        report.append(Layer("user namespace", True, "each worker in one of its own (its "
                            "process count its own), holding capabilities only there, "
                            "and dropping them"))
    report.append(Layer("mount namespace", mounts,
                        "state and trust directories hidden; private /tmp, /var/tmp, "
                        "/dev/shm and working directory on one tmpfs of the disk quota"
                        if mounts else f"cannot unshare: {why}" if why else mount_why))
    report.append(Layer("PID namespace", pidns,
                        "one per agent, with its own /proc" if pidns
                        else "needs root" if not root else f"cannot unshare: {why}"))
    if network == "host":
        report.append(Layer("network namespace", False,
                            "off (--agent-network host): agents have the host's network"))
        netns = False
    else:
        report.append(Layer("network namespace", netns,
                            "empty: agents have no network" if netns
                            else f"cannot unshare: {why}"))

    abi = _landlock.abi_version()
    report.append(Layer("Landlock", abi > 0,
                        f"ABI {abi}: file system" + (", TCP" if abi >= 4 else "")
                        + (", signals and abstract sockets scoped" if abi >= 6 else "")
                        if abi else "not offered by this kernel (needs 5.13 and "
                        "lsm=landlock at boot)"))

    seccomp: bytes | None = None
    problem = _seccomp.problem()
    if problem is None:
        try:
            seccomp = _seccomp.build(unix_sockets)
        except OSError as exc:
            problem = str(exc)
    report.append(Layer("seccomp", seccomp is not None,
                        _seccomp.describe() if seccomp is not None else str(problem)))

    cgroups: Cgroups | None = None
    if create:
        cgroups, missing = Cgroups.available()
    else:
        missing = find_controllers()
    for controller in CONTROLLERS:
        applied = controller not in missing
        what = {"pids": "processes of an agent counted and killed together",
                "memory": "memory of all an agent's processes together",
                "cpu": "CPU rate and time of all an agent's processes together"}[controller]
        report.append(Layer(f"cgroup {controller}", applied,
                            what if applied else missing[controller]))
    return Layers(uids, userns, mounts, pidns, netns, abi, seccomp, cgroups, report)
