"""A place as a systemd service: the unit `tacoma place --print-systemd-unit` prints.

The unit runs the same command the user typed (the real path of the `tacoma` that printed
it, and the options given with it), confined by every systemd directive the place can bear.
The place runs as root on purpose: it gives each agent a uid of its own, makes cgroups,
mount, PID, network and IPC namespaces for it, and has it load Landlock rules and a seccomp
filter (`place.workers._containment`, `agent._sandbox`). So the directives that would take
those powers away (PrivateUsers=, ProtectControlGroups=, a capability set without
CAP_SYS_ADMIN) stay off, and each of those choices is written, with its reason, as a
comment in the unit, where the administrator reading it sees it.

Most of the unit is fixed text. What depends on the command line is computed here, each
piece a small function: the ExecStart= line (quoted as systemd splits it), the state
directory (StateDirectory= below /var/lib, else ReadWritePaths=), whether the trust
directory must be writable (a loopback place with no identity makes its CA on first
start), whether the place binds a port below 1024, whether anything it needs lies below a
home directory (ProtectHome=read-only instead of yes), and the stop timeout and task limit
derived from --grace and the limits. Problems that would only show when systemd starts the
unit (a relative path, a place off loopback with no identity) are refused here with a
ValueError saying what to give instead.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from ..agent._mounts import is_below
from ..trust._store import names_a_file
from ..wire._address import parse_address
from ._settings import PlaceSettings
from .meets._access import is_loopback, is_wildcard
from .workers._uids import RUN_DIR

__all__ = ["STATE_DIR", "TRUST_DIR", "systemd_unit", "tacoma_command"]

#: Where the unit keeps the place's state (StateDirectory=tacoma) and its trust directory
#: (ConfigurationDirectory=tacoma/trust: the identity file, the deny list).
STATE_DIR = Path("/var/lib/tacoma")
TRUST_DIR = Path("/etc/tacoma/trust")
#: Directories ProtectHome= hides.
_HOMES = ("/home", "/root", "/run/user")
#: Arguments ExecStart= takes as they are; anything else is quoted.
_PLAIN = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")


def tacoma_command(argv0: str | None = None) -> list[str]:
    """The command that runs this tacoma: the real path of the `tacoma` script it was
    started as, or this Python with `-m tacoma` (started as `python -m tacoma`)."""
    argv0 = sys.argv[0] if argv0 is None else argv0
    found = argv0 if os.sep in argv0 else shutil.which(argv0)
    if found is None or Path(found).suffix == ".py" or not os.access(found, os.X_OK):
        # Not the symlink's target: a virtualenv's python is a symlink to the system's,
        # and only the link finds the virtualenv's packages.
        return [os.path.abspath(sys.executable), "-m", "tacoma"]
    return [os.path.realpath(found)]


def _quote(word: str, command: bool = True) -> str:
    """`word` as one word of ExecStart= (systemd.service(5), "Command lines"), or (not
    `command`) of a list of paths such as ReadWritePaths=."""
    if any(ord(c) < 32 or ord(c) == 127 for c in word):
        raise ValueError(f"{word!r}: a unit cannot hold control characters")
    # % starts a specifier anywhere, even within quotes; $ a variable, in a command only.
    word = word.replace("%", "%%")
    if command:
        word = word.replace("$", "$$")
    if _PLAIN.fullmatch(word):
        return word
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _identity_file(spec: str | None) -> Path | None:
    """The identity file `--identity` names, if it names a file (not a name)."""
    if spec is None or not names_a_file(spec):
        return None
    return Path(spec)


def _check_paths(settings: PlaceSettings, state_dir: Path | None) -> None:
    given = [("--identity", _identity_file(settings.identity)),
             ("--deny-list", settings.deny_list), ("--state-dir", state_dir)]
    for option, path in given:
        if path is not None and not path.is_absolute():
            raise ValueError(f"{option} {path}: give an absolute path in a unit (systemd "
                             f"starts the place in /), e.g. {option} {Path.cwd() / path}")


def _check_identity(settings: PlaceSettings) -> None:
    host, _ = parse_address(settings.listen, listen=True)
    if settings.identity is None and not settings.insecure and not is_loopback(host):
        dialled = "ADDRESS" if is_wildcard(host) else host
        raise ValueError(
            f"a place listening on {settings.listen} (not loopback) needs an identity: "
            f"issue one on the CA's host (tacoma trust issue NAME --place --address "
            f"{dialled} --out NAME.pem), copy it to {TRUST_DIR}/place.pem on this host, "
            f"and add --identity {TRUST_DIR}/place.pem")


def _state_directory(state_dir: Path | None) -> str:
    """StateDirectory=, and ReadWritePaths= for a state directory outside /var/lib."""
    state = state_dir or STATE_DIR
    lib = STATE_DIR.parent
    if lib in state.parents:
        return f"StateDirectory={state.relative_to(lib)}\nStateDirectoryMode=0711"
    return (f"StateDirectory={STATE_DIR.name}\nStateDirectoryMode=0711\n"
            f"# The state directory given lies outside {lib}: writable, and it must exist\n"
            f"# before the place starts (everything else is read-only to it).\n"
            f"ReadWritePaths={_quote(str(state), command=False)}")


def _trust_directory(settings: PlaceSettings) -> str:
    text = (f"ConfigurationDirectory={TRUST_DIR.relative_to('/etc')}\n"
            "ConfigurationDirectoryMode=0700")
    if settings.identity is None and not settings.insecure:
        text += ("\n# No --identity: on first start the place makes a CA and its local identity\n"
                 "# in its trust directory, which is therefore writable.\n"
                 f"ReadWritePaths={TRUST_DIR}")
    return text


def _capabilities(settings: PlaceSettings) -> str:
    caps = ["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_KILL", "CAP_SETGID",
            "CAP_SETPCAP", "CAP_SETUID", "CAP_SYS_ADMIN"]
    _, port = parse_address(settings.listen, listen=True)
    if 0 < port < 1024:
        caps.append("CAP_NET_BIND_SERVICE")
    return " ".join(sorted(caps))


def _protect_home(command: Sequence[str], settings: PlaceSettings,
                  state_dir: Path | None) -> str:
    needed = [Path(command[0]), Path(sys.prefix), Path(__file__).resolve()]
    needed += [p for p in (_identity_file(settings.identity), settings.deny_list, state_dir)
               if p is not None]
    under = sorted({str(p) for p in needed for home in _HOMES if is_below(str(p), home)})
    if not under:
        return "ProtectHome=yes"
    return ("# Read-only, not hidden: the place needs what lies below a home directory\n"
            f"# ({', '.join(under)}).\n"
            "ProtectHome=read-only")


def systemd_unit(settings: PlaceSettings, arguments: Sequence[str],
                 command: Sequence[str] | None = None, state_dir: Path | None = None) -> str:
    """The unit that runs `command place arguments...` as a service.

    settings: what those arguments make (checked). command: the tacoma to run (default:
    this one, `tacoma_command`). state_dir: the state directory as the arguments give it
    (None: the unit's, /var/lib/tacoma). ValueError if the unit could not start as given
    (a relative path, no identity off loopback).
    """
    command = list(command or tacoma_command())
    _check_paths(settings, state_dir)
    _check_identity(settings)
    exec_start = " ".join(_quote(word) for word in [*command, "place", *arguments])
    limits = settings.limits
    # --grace for running meets, then up to 10 s for the cancelled ones to end, then the
    # pools and cgroups emptied: SIGKILL only once all of that had its time.
    stop_seconds = math.ceil(settings.grace_seconds) + 30
    # Each agent's processes count against its own pids cgroup, outside this unit's; where
    # the host has none they count here, so the backstop leaves room for all of them.
    tasks = settings.max_meets * limits.processes + settings.warm_max + 1024
    return _UNIT.format(
        exec_start=exec_start,
        state_dir=STATE_DIR,
        trust_dir=TRUST_DIR,
        state_directory=_state_directory(state_dir),
        trust_directory=_trust_directory(settings),
        run_dir=RUN_DIR.relative_to("/run"),
        stop_seconds=stop_seconds,
        grace=f"{settings.grace_seconds:g}",
        tasks=tasks,
        capabilities=_capabilities(settings),
        protect_home=_protect_home(command, settings, state_dir),
    )


_UNIT = """\
# A tacoma place as a systemd service, printed by `tacoma place --print-systemd-unit`.
#
#   tacoma place OPTIONS --print-systemd-unit > /etc/systemd/system/tacoma-place.service
#   systemctl daemon-reload && systemctl enable --now tacoma-place
#
# The place runs as root on purpose: it switches each agent to a uid of its own and
# confines it with cgroups, namespaces, Landlock and seccomp. The directives below take
# away everything else; those left off are off because the place needs what they take,
# as each comment says.

[Unit]
Description=tacoma place (mobile agents)
After=network-online.target
Wants=network-online.target

[Service]
# The place does not notify systemd when it is ready: it is up once its program runs, and
# logs "tacoma place listening on ..." when it accepts meets.
Type=exec
ExecStart={exec_start}
Environment=TACOMA_STATE_DIR={state_dir}
Environment=TACOMA_TRUST_DIR={trust_dir}
{state_directory}
# The trust directory: the place's identity file and the deny list (revoked).
{trust_directory}
# /run/{run_dir} records which agent uids each place of this host holds; places started
# by hand share it, so it is kept when this one stops.
RuntimeDirectory={run_dir}
RuntimeDirectoryMode=0755
RuntimeDirectoryPreserve=yes
# Not 0077: some directories the place makes (the compiled programs' cache) must be
# entered by the agents' own uids.
UMask=0022

Restart=on-failure
RestartSec=2s
# SIGTERM to the place alone: it refuses new meets, lets running ones finish for --grace
# ({grace} s), then kills its agents itself. Its agents run in cgroups of its own outside
# this unit's; what is left in the unit after it exits (its zygotes) gets SIGKILL.
KillMode=mixed
TimeoutStopSec={stop_seconds}s
# Every connection and every worker's channel is a descriptor of the place's.
LimitNOFILE=65536
TasksMax={tasks}
# No: the place makes its agents' cgroups at the top of each hierarchy (tacoma/), not
# below its own, and needs no delegation.
Delegate=no

# Capabilities: namespaces and mounts (CAP_SYS_ADMIN); each agent's own uid (CAP_SETUID,
# CAP_SETGID, CAP_CHOWN for its directory); dropping an agent's bounding set
# (CAP_SETPCAP); reading, removing and killing what agents of other uids left
# (CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_KILL). Nothing else.
CapabilityBoundingSet={capabilities}
AmbientCapabilities=
# The place gives privileges away and never gains any through exec; it sets
# no_new_privs for each agent itself, before Landlock and seccomp.
NoNewPrivileges=yes
# Off: agents' uids must be real uids of the host, and the place root outside any user
# namespace to make cgroups and switch to them.
PrivateUsers=no
# Off: the place makes a cgroup for each agent (processes, memory, CPU), which needs
# /sys/fs/cgroup writable.
ProtectControlGroups=no
# Everything read-only but the state, trust and run directories above and /sys/fs/cgroup.
ProtectSystem=strict
{protect_home}
# The place's own mounts (its agents' views) are made in namespaces of their own anyway.
PrivateMounts=yes
PrivateTmp=yes
PrivateDevices=yes
# /proc/sys and /sys read-only (not /sys/fs/cgroup: see ProtectControlGroups=).
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectClock=yes
ProtectHostname=yes
# Default, not invisible: the place reads its agents' processes (other uids) in /proc,
# for tacoma ps and to know that no agent of a dead place still holds its uids. All of
# /proc: agents without a PID namespace of their own read this one.
ProtectProc=default
ProcSubset=all
# The namespaces the place makes for its agents (mount, PID, network, IPC); not user,
# UTS nor cgroup namespaces.
RestrictNamespaces=mnt pid net ipc
# The place listens and meets other places over IP; it talks to its workers over Unix
# sockets. Agents inherit these too.
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
# Off: agents' interpreters may compile code at run time (Guile's JIT, libffi's closures).
MemoryDenyWriteExecute=no
SystemCallArchitectures=native
# Not @mount, @privileged nor @resources: the place mounts its agents' views, switches
# them to their uids and sets their limits. Agents inherit this filter, and load a
# stricter one of the place's own.
SystemCallFilter=~@clock @cpu-emulation @debug @keyring @module @obsolete @raw-io @reboot @swap
SystemCallErrorNumber=EPERM

[Install]
WantedBy=multi-user.target
"""
