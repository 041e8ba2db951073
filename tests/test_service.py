"""`tacoma place --print-systemd-unit`: the unit, checked by systemd's own tools, and the
place run under the unit's restrictions.

systemd-analyze checks the unit offline (`verify`: every directive known and valid, the
ExecStart= binary there; `security --offline=yes`: its exposure). Running the unit needs
systemd as init, which a test machine may not have; so the last tests apply the unit's
restrictions themselves, read from the unit's text, the way systemd applies them before it
runs ExecStart=: a mount namespace with the file system read-only but for the unit's
writable directories, a private /tmp, /proc/sys and /sys read-only but for
/sys/fs/cgroup (the mount side of ProtectSystem=strict, PrivateTmp=,
ProtectKernelTunables=, ReadWritePaths=); the system call filter (SystemCallFilter=,
SystemCallErrorNumber=, RestrictNamespaces=, RestrictAddressFamilies=) loaded with
libseccomp; then the capability bounding set and no_new_privs (CapabilityBoundingSet=,
NoNewPrivileges=) with setpriv. A place started so must serve meets in every language with
every sandbox layer it has here without them, and stop cleanly on SIGTERM. Not applied:
PrivateDevices= and the directives that are only seccomp rules for calls a place never
makes (RestrictRealtime=, RestrictSUIDSGID=, LockPersonality=).
"""

from __future__ import annotations

import json
import os
import re
import selectors
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import READY, is_root

SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(SYSTEMD_ANALYZE is None,
                                   reason="needs systemd-analyze (Debian: apt-get install "
                                          "systemd)")
#: The tacoma script of this installation, as a user runs it.
TACOMA = Path(sys.executable).with_name("tacoma")


def print_unit(*options: str, command: tuple[str, ...] | None = None,
               check: bool = True) -> subprocess.CompletedProcess[str]:
    """`tacoma place OPTIONS --print-systemd-unit`, as a user runs it."""
    if command is None:
        command = (str(TACOMA),) if TACOMA.exists() else (sys.executable, "-m", "tacoma")
    done = subprocess.run([*command, "place", *options, "--print-systemd-unit"],
                          capture_output=True, text=True, timeout=60, check=False)
    if check:
        assert done.returncode == 0, done.stderr
    return done


def directives(unit: str) -> dict[str, list[str]]:
    """The unit's settings: name -> each value given, in order (comments left out)."""
    found: dict[str, list[str]] = {}
    for line in unit.splitlines():
        if line and not line.startswith(("#", "[")):
            name, _, value = line.partition("=")
            found.setdefault(name, []).append(value)
    return found


def exec_start(unit: str) -> list[str]:
    [line] = directives(unit)["ExecStart"]
    return shlex.split(line.replace("%%", "%").replace("$$", "$"))


def write_unit(directory: Path, unit: str) -> Path:
    path = directory / "tacoma-place.service"
    path.write_text(unit)
    return path


# ---------------------------------------------------------------- the unit's text
@pytest.mark.skipif(not TACOMA.exists(), reason=f"no tacoma script beside {sys.executable}")
def test_exec_start_is_this_tacoma_with_the_options_given() -> None:
    options = ["--listen", "0.0.0.0:7707", "--state-dir", "/var/lib/tacoma", "--identity",
               "/etc/tacoma/trust/place.pem", "--grace", "30s", "-q"]
    unit = print_unit(*options).stdout
    assert exec_start(unit) == [os.path.realpath(TACOMA), "place", *options]
    settings = directives(unit)
    assert settings["TimeoutStopSec"] == ["60s"]  # --grace and 30 s to end the rest
    assert settings["StateDirectory"] == ["tacoma"]
    assert "ReadWritePaths" not in settings  # the identity is given: the trust dir is read


def test_run_as_python_m_tacoma_the_unit_runs_this_python() -> None:
    unit = print_unit("--listen", "127.0.0.1:7707",
                      command=(sys.executable, "-m", "tacoma")).stdout
    assert exec_start(unit) == [os.path.abspath(sys.executable), "-m", "tacoma", "place",
                                "--listen", "127.0.0.1:7707"]


def test_the_unit_follows_what_the_place_will_need() -> None:
    # On loopback without an identity, the place makes its CA on first start: the trust
    # directory is writable. A port below 1024 needs its capability.
    settings = directives(print_unit("--listen", "127.0.0.1:443").stdout)
    assert settings["ReadWritePaths"] == ["/etc/tacoma/trust"]
    assert "CAP_NET_BIND_SERVICE" in settings["CapabilityBoundingSet"][0]
    # A state directory below /var/lib is a StateDirectory=; elsewhere it is made writable.
    settings = directives(print_unit("--state-dir", "/var/lib/agents").stdout)
    assert settings["StateDirectory"] == ["agents"]
    settings = directives(print_unit("--state-dir", "/srv/tacoma").stdout)
    assert settings["ReadWritePaths"] == ["/srv/tacoma", "/etc/tacoma/trust"]
    assert "CAP_NET_BIND_SERVICE" not in settings["CapabilityBoundingSet"][0]
    # Below a home directory: read, not hidden.
    settings = directives(print_unit("--state-dir", "/home/ops/tacoma").stdout)
    assert settings["ProtectHome"] == ["read-only"]


def test_words_are_quoted_as_systemd_splits_them() -> None:
    unit = print_unit("--state-dir", "/srv/my $places/100%", "--allow", "*:ag_$x").stdout
    [line] = directives(unit)["ExecStart"]
    assert line.endswith('place --state-dir "/srv/my $$places/100%%" --allow "*:ag_$$x"')
    # Only a command line expands variables.
    assert directives(unit)["ReadWritePaths"][0] == '"/srv/my $places/100%%"'
    assert exec_start(unit)[-4:] == ["--state-dir", "/srv/my $places/100%", "--allow",
                                     "*:ag_$x"]


@pytest.mark.parametrize(("options", "says"), [
    (("--listen", "10.0.0.5:7707"), "needs an identity: issue one"),
    (("--state-dir", "state"), "--state-dir state: give an absolute path"),
    (("--listen", "127.0.0.1:7707", "--identity", "place.pem"), "give an absolute path"),
])
def test_a_unit_that_could_not_start_is_refused_saying_why(options: tuple[str, ...],
                                                           says: str) -> None:
    done = print_unit(*options, check=False)
    assert done.returncode == 2 and says in done.stderr, done.stderr
    assert done.stdout == ""


def test_the_how_to_shows_the_unit_as_printed() -> None:
    """docs/how-to/service.md shows the whole unit, for `tacoma` in /usr/local/bin."""
    page = (Path(__file__).resolve().parent.parent / "docs" / "how-to" / "service.md")
    shown = re.search(r"<!-- service-unit: (.*?) -->\n```ini\n(.*?)```", page.read_text(),
                      re.S)
    assert shown
    options, text = shlex.split(shown.group(1)), shown.group(2)
    printed = print_unit(*options).stdout
    [exec_line] = directives(printed)["ExecStart"]
    executable = exec_line.split(" place ", 1)[0]
    assert text == printed.replace(f"ExecStart={executable} ",
                                   "ExecStart=/usr/local/bin/tacoma ")


# ---------------------------------------------------------------- systemd's own checks
@needs_analyze
@pytest.mark.parametrize("options", [
    ("--listen", "0.0.0.0:7707", "--state-dir", "/var/lib/tacoma", "--identity",
     "/etc/tacoma/trust/place.pem"),
    ("--listen", "127.0.0.1:7707",),
    ("--listen", "[::]:443", "--identity", "place-a", "--state-dir", "/srv/my $places%",
     "--allow", '*:"ag_*"'),
], ids=["cluster", "loopback", "quoted"])
def test_systemd_analyze_verifies_the_unit(tmp_path: Path, options: tuple[str, ...]) -> None:
    path = write_unit(tmp_path, print_unit(*options).stdout)
    done = subprocess.run([str(SYSTEMD_ANALYZE), "verify", "--man=no", str(path)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "tacoma-place.service" not in done.stderr, done.stderr  # no warning about it


def security(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SYSTEMD_ANALYZE), "security", "--offline=yes", "--no-pager",
                           str(path)], capture_output=True, text=True, timeout=60,
                          check=False)


@needs_analyze
def test_systemd_analyze_security_rates_the_unit_ok(tmp_path: Path) -> None:
    path = write_unit(tmp_path, print_unit("--listen", "0.0.0.0:7707", "--identity",
                                           "/etc/tacoma/trust/place.pem").stdout)
    done = security(path)
    if "--offline" in done.stderr:
        pytest.skip(f"this systemd-analyze cannot rate a unit offline: {done.stderr}")
    overall = re.search(r"Overall exposure level for tacoma-place\.service: (\d+\.\d+) (\w+)",
                        done.stdout)
    assert overall, done.stdout + done.stderr
    # What the place bears is on; what it needs (root, namespaces, cgroups) is what is left.
    assert overall.group(2) in ("PERFECT", "SAFE", "OK"), done.stdout
    for applied in ("NoNewPrivileges=", "ProtectSystem=", "ProtectHome=", "PrivateTmp=",
                    "PrivateDevices=", "ProtectKernelTunables=", "ProtectKernelModules=",
                    "CapabilityBoundingSet=~CAP_SYS_PTRACE", "RestrictNamespaces=~user",
                    "SystemCallArchitectures="):
        assert re.search(rf"✓ {re.escape(applied)}\s", done.stdout), applied


# ---------------------------------------------------------------- the place under the unit
#: Applies the unit's restrictions (see the module's header) and runs the command after
#: the JSON of what to apply. Run as root.
CONFINE = textwrap.dedent("""
    import ctypes, json, os, sys
    import pyseccomp as sc
    spec = json.loads(sys.argv[1])
    libc = ctypes.CDLL(None, use_errno=True)
    MS_BIND, MS_REC, MS_SLAVE = 4096, 16384, 1 << 19
    RDONLY, AT_RECURSIVE, SYS_MOUNT_SETATTR = 1, 0x8000, 442

    class Attr(ctypes.Structure):
        _fields_ = [(n, ctypes.c_uint64) for n in ("set", "clr", "prop", "userns")]

    def check(result, what):
        if result != 0:
            raise OSError(ctypes.get_errno(), f"{what}: {os.strerror(ctypes.get_errno())}")

    def mount(source, target, fstype, flags, data=None):
        check(libc.mount(source and source.encode(), target.encode(),
                         fstype and fstype.encode(), flags, data and data.encode()), target)

    def read_only(path, on):
        attr = Attr(RDONLY, 0, 0, 0) if on else Attr(0, RDONLY, 0, 0)
        check(libc.syscall(SYS_MOUNT_SETATTR, -100, path.encode(), AT_RECURSIVE,
                           ctypes.byref(attr), ctypes.sizeof(attr)), f"setattr {path}")

    def own_mount(path, writable):
        mount(path, path, None, MS_BIND | MS_REC)
        read_only(path, not writable)

    check(libc.unshare(0x00020000), "unshare")
    mount(None, "/", None, MS_REC | MS_SLAVE)
    read_only("/", True)                            # ProtectSystem=strict
    for api in ("/proc", "/dev", "/sys/fs/cgroup"):  # but the API file systems
        read_only(api, False)
    own_mount("/proc/sys", False)                   # ProtectKernelTunables=
    for tmp in ("/tmp", "/var/tmp"):                # PrivateTmp=
        mount("tmpfs", tmp, "tmpfs", 0, "mode=1777")
    for path in spec["writable"]:                   # ReadWritePaths=, StateDirectory=, ...
        own_mount(path, True)

    f = sc.SyscallFilter(sc.ALLOW)
    for name in spec["denied"]:                     # SystemCallFilter=~
        try:
            f.add_rule(sc.ERRNO(spec["errno"]), name)
        except (OSError, ValueError, RuntimeError):
            pass  # not a call of this architecture
    for flag in spec["namespaces_denied"]:          # RestrictNamespaces=
        f.add_rule(sc.ERRNO(1), "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
        f.add_rule(sc.ERRNO(1), "unshare", sc.Arg(0, sc.MASKED_EQ, flag, flag))
        f.add_rule(sc.ERRNO(1), "setns", sc.Arg(1, sc.MASKED_EQ, flag, flag))
    f.add_rule(sc.ERRNO(38), "clone3")
    for family in range(64):                        # RestrictAddressFamilies=
        if family not in spec["families"]:
            f.add_rule(sc.ERRNO(97), "socket", sc.Arg(0, sc.EQ, family))
    f.load()
    os.execvp(spec["argv"][0], spec["argv"])
""")
FAMILIES = {"AF_UNIX": 1, "AF_INET": 2, "AF_INET6": 10}
NAMESPACES = {"cgroup": 0x02000000, "ipc": 0x08000000, "net": 0x40000000, "mnt": 0x00020000,
              "pid": 0x20000000, "user": 0x10000000, "uts": 0x04000000}


def confined_by(unit: str, writable: list[str]) -> list[str]:
    """The command that runs the unit's ExecStart= under its restrictions (`CONFINE`)."""
    assert SYSTEMD_ANALYZE is not None
    settings = directives(unit)
    denied = []
    [syscall_filter] = settings["SystemCallFilter"]
    assert syscall_filter.startswith("~")
    for group in syscall_filter[1:].split():
        listed = subprocess.run([SYSTEMD_ANALYZE, "syscall-filter", "--no-pager", group],
                                capture_output=True, text=True, timeout=30, check=True)
        # "@group", "    # what it is for", then one call a line (or an "@group" within)
        for line in listed.stdout.splitlines()[1:]:
            call = line.strip()
            assert not call.startswith("@"), f"{group} holds {call}: expand it too"
            if call and not call.startswith("#"):
                denied.append(call)
    [allowed_ns] = settings["RestrictNamespaces"]
    caps = settings["CapabilityBoundingSet"][0].lower().replace("cap_", "+").split()
    assert settings["NoNewPrivileges"] == ["yes"] and settings["AmbientCapabilities"] == [""]
    setpriv = ["setpriv", "--no-new-privs", "--inh-caps=-all", "--ambient-caps=-all",
               "--bounding-set=-all," + ",".join(caps), "--"]
    spec = {"writable": writable, "denied": denied,
            "errno": {"EPERM": 1}[settings["SystemCallErrorNumber"][0]],
            "namespaces_denied": [flag for name, flag in NAMESPACES.items()
                                  if name not in allowed_ns.split()],
            "families": [FAMILIES[f] for f in settings["RestrictAddressFamilies"][0].split()],
            "argv": [*setpriv, *exec_start(unit)]}
    return [sys.executable, "-c", CONFINE, json.dumps(spec)]


@pytest.mark.root
@pytest.mark.skipif(not is_root, reason="the place's layers under the unit need root")
@pytest.mark.skipif(SYSTEMD_ANALYZE is None or shutil.which("setpriv") is None,
                    reason="needs systemd-analyze and setpriv (Debian: util-linux)")
def test_the_place_serves_meets_under_the_units_restrictions(tmp_path: Path) -> None:
    from tacoma.agent._interpreter import discover_interpreters

    state, trust = tmp_path / "state", tmp_path / "trust"
    unit = print_unit("--listen", "127.0.0.1:0", "--state-dir", str(state)).stdout
    # The unit's trust directory is the test's (as $TACOMA_TRUST_DIR is the session's);
    # writable, as the unit makes it for a place with no identity.
    assert "/etc/tacoma/trust" in directives(unit)["ReadWritePaths"]
    # Made as systemd makes them (StateDirectory=, RuntimeDirectory=), or found.
    writable = [state, trust, Path("/run/tacoma")]
    for directory, mode in zip(writable, (0o711, 0o700, 0o755), strict=True):
        directory.mkdir(mode=mode, exist_ok=True)
    env = {**os.environ, "TACOMA_TRUST_DIR": str(trust)}
    log = tmp_path / "place.log"
    with open(log, "w") as stderr:
        place = subprocess.Popen(confined_by(unit, [str(d) for d in writable]),
                                 stdout=subprocess.PIPE, stderr=stderr, text=True, env=env)
    try:
        assert place.stdout is not None
        selector = selectors.DefaultSelector()
        selector.register(place.stdout, selectors.EVENT_READ)
        ready = READY.match(place.stdout.readline()) if selector.select(60) else None
        assert ready, log.read_text()
        address = ready.group(1)
        # It runs as the unit would run it: no new privileges, its file system read-only.
        assert re.search(r"^NoNewPrivs:\s+1$", Path(f"/proc/{place.pid}/status").read_text(),
                         re.M)
        root_mount = [line.split() for line in
                      Path(f"/proc/{place.pid}/mountinfo").read_text().splitlines()
                      if line.split()[4] == "/"]
        assert root_mount and root_mount[0][5].startswith("ro"), root_mount

        # Every layer it applies without the unit's restrictions, it applies under them.
        doctor = subprocess.run([sys.executable, "-m", "tacoma", "doctor", "--json"],
                                capture_output=True, text=True, timeout=120, check=False)
        expected = sorted(layer["layer"] for layer in json.loads(doctor.stdout)["layers"]
                          if layer["applied"])
        status = subprocess.run([sys.executable, "-m", "tacoma", "status", address,
                                 "--state-dir", str(state), "--json"], env=env,
                                capture_output=True, text=True, timeout=60, check=False)
        assert status.returncode == 0, status.stderr + log.read_text()
        assert "NOT applied" not in log.read_text()
        applied = sorted(layer["layer"] for layer in json.loads(status.stdout)["layers"]
                         if layer["applied"])
        assert applied == expected, status.stdout

        examples = Path(__file__).resolve().parent.parent / "examples" / "hello"
        met_by = []
        for agent, interpreter in sorted(discover_interpreters().items()):
            if interpreter.check() is not None:
                continue  # not installed here
            # hello.c builds for WebAssembly too (a language of fresh instances has no
            # hello of its own suffix: a module is no source to read)
            suffixes = (".c",) if interpreter.instances else interpreter.suffixes
            [program] = [p for p in examples.glob("hello.*") if p.suffix in suffixes]
            met = subprocess.run([sys.executable, "-m", "tacoma", "meet", f"{agent}@{address}",
                                  "--code", str(program), "-f", "NAME=unit", "--json"],
                                 env=env, capture_output=True, text=True, timeout=120,
                                 check=False)
            assert met.returncode == 0, f"{agent}: {met.stdout}{met.stderr}{log.read_text()}"
            met_by.append(agent)
        assert "ag_python" in met_by
    finally:
        if place.poll() is None:
            place.send_signal(signal.SIGTERM)
        code = place.wait(60)
    assert code == 0, log.read_text()
