"""The cluster how-to (docs/how-to/cluster.md), followed on the testbed as a user follows it.

The commands are read from the page itself: each fenced block after a
`<!-- cluster-howto: NAME -->` comment. They run as written but for what a testbed must
change: the example addresses (10.0.0.11, .12, .13) become the testbed hosts' (h1, h2, h3),
and the paths a host keeps (/etc/tacoma, /var/lib/tacoma) move below a directory of that
host's own, so that each place is started from its host's directory only (its trust
directory, holding the identity copied there, and its state directory). The admin host is
this process's network namespace, with a trust directory of its own; `ssh HOST COMMAND`
runs COMMAND for that host, `scp FILE HOST:PATH` copies into that host's directory, and a
place runs in its host's network namespace (nsenter). systemctl cannot run here (systemd
is not this machine's init): the unit the page prints is checked instead.

Needs root, ip and nsenter (the testbed); skipped otherwise.
"""

from __future__ import annotations

import os
import re
import selectors
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import tacoma.testbed

from conftest import READY

ROOT = Path(__file__).resolve().parent.parent
HOWTO = ROOT / "docs" / "how-to" / "cluster.md"
#: The page's example hosts, by address, and the testbed host each one becomes.
HOSTS = {"10.0.0.11": "h1", "10.0.0.12": "h2", "10.0.0.13": "h3"}
#: What a host keeps, moved below its own directory on the testbed.
HOST_PATHS = ("/etc/tacoma", "/var/lib/tacoma", "/etc/systemd")

USABLE, WHY = tacoma.testbed.Testbed.available()
pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.skipif(not USABLE, reason=WHY)]


def howto_blocks() -> dict[str, list[str]]:
    """The page's marked blocks: name -> its lines (blank lines and comments left out for
    shell blocks)."""
    found: dict[str, list[str]] = {}
    for name, language, body in re.findall(
            r"<!-- cluster-howto: (\S+) -->\n```(\w*)\n(.*?)```", HOWTO.read_text(), re.S):
        lines = body.splitlines()
        if language == "sh":
            lines = [line for line in lines if line.strip() and not line.startswith("#")]
        found[name] = lines
    return found


def host_of(line: str) -> str:
    """The testbed host a line of the page is about: the first example address in it."""
    found = re.search(r"10\.0\.0\.1[123]\b", line)
    assert found, f"no example host in: {line}"
    return HOSTS[found.group(0)]


@dataclass
class Cluster:
    """The admin host and the hosts of the page, on a testbed."""

    testbed: tacoma.testbed.Testbed
    root: Path
    places: dict[str, subprocess.Popen[str]] = field(default_factory=dict)

    @property
    def admin(self) -> Path:
        return self.root / "admin"

    def host_dir(self, host: str) -> Path:
        return self.root / host

    def localize(self, line: str, host: str | None = None) -> list[str]:
        """A line of the page as this testbed runs it: its words, with the example
        addresses made the testbed's, and (for a host's command) its paths made the host's."""
        for example, name in HOSTS.items():
            line = re.sub(rf"\b{re.escape(example)}\b", self.testbed.address(name), line)
        if host is not None:
            for path in HOST_PATHS:
                line = line.replace(path, f"{self.host_dir(host)}{path}")
        return shlex.split(line)

    def env(self, words: list[str]) -> tuple[dict[str, str], list[str]]:
        """The leading NAME=VALUE words of a command, and the command: `tacoma` as this
        interpreter runs it."""
        env = {}
        while "=" in words[0] and not words[0].startswith("-"):
            name, _, value = words.pop(0).partition("=")
            env[name] = value
        assert words[0] == "tacoma", words
        return env, [sys.executable, "-m", "tacoma", *words[1:]]

    def admin_runs(self, line: str) -> subprocess.CompletedProcess[str]:
        """Run a line of the page on the admin host (its own trust directory)."""
        env, argv = self.env(self.localize(line))
        done = subprocess.run(argv, cwd=self.admin, capture_output=True, text=True,
                              timeout=120, check=False,
                              env={**os.environ, "TACOMA_TRUST_DIR": str(self.admin / "trust"),
                                   **env})
        assert done.returncode == 0, f"{line}\n{done.stdout}{done.stderr}"
        return done

    def copy(self, line: str) -> None:
        """`ssh root@HOST COMMAND` (run for that host) or `scp FILE root@HOST:PATH`."""
        host = host_of(line)
        words = self.localize(line, host)
        if words[0] == "ssh":
            subprocess.run(words[2:], check=True, timeout=30)
        else:
            assert words[0] == "scp" and len(words) == 3, words
            source, target = self.admin / words[1], Path(words[2].split(":", 1)[1])
            shutil.copyfile(source, target)
            target.chmod(source.stat().st_mode & 0o777)  # as scp makes a new file

    def start(self, line: str) -> str:
        """Start the place of a line of the page, in its host's network namespace; its
        address once it accepts meets."""
        host = host_of(line)
        env, argv = self.env(self.localize(line, host))
        log = self.host_dir(host) / "place.log"
        with open(log, "w") as stderr:
            proc = subprocess.Popen([*self.testbed.prefix(host), *argv], text=True,
                                    stdout=subprocess.PIPE, stderr=stderr,
                                    env={**os.environ, **env})
        self.places[host] = proc
        assert proc.stdout is not None
        selector = selectors.DefaultSelector()
        selector.register(proc.stdout, selectors.EVENT_READ)
        ready = READY.match(proc.stdout.readline()) if selector.select(60) else None
        assert ready, f"the place on {host} did not start: {log.read_text()}"
        return ready.group(1)

    def stop(self) -> None:
        for host, proc in self.places.items():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise
            assert code == 0, (self.host_dir(host) / "place.log").read_text()


@pytest.fixture(scope="module")
def cluster(testbed: tacoma.testbed.Testbed,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The page followed up to its first trip: the CA, an identity per host, each copied
    to its host, and a place started by hand on each."""
    blocks = howto_blocks()
    cluster = Cluster(testbed, tmp_path_factory.mktemp("cluster"))
    for directory in (cluster.admin, *map(cluster.host_dir, HOSTS.values())):
        directory.mkdir()
    for line in blocks["ca"] + blocks["issue"]:
        cluster.admin_runs(line)
    for line in blocks["copy"]:
        cluster.copy(line)
    try:
        for line in blocks["start"]:
            cluster.start(line)
        yield cluster
    finally:
        cluster.stop()


def test_the_page_has_every_step() -> None:
    blocks = howto_blocks()
    assert set(blocks) == {"ca", "issue", "copy", "service", "start", "agent", "trip",
                           "briefcase", "status"}
    # One command per host issues its identity; one starts its place.
    for step in ("issue", "start", "status"):
        assert sorted(map(host_of, blocks[step])) == \
            sorted(HOSTS.values()), step


def test_each_host_holds_its_identity_and_nothing_of_the_ca(cluster: Cluster) -> None:
    for host in HOSTS.values():
        trust = cluster.host_dir(host) / "etc" / "tacoma" / "trust"
        assert sorted(p.name for p in trust.iterdir()) == ["place.pem"]
        assert (trust / "place.pem").stat().st_mode & 0o777 == 0o600
        assert b"PRIVATE KEY" in (trust / "place.pem").read_bytes()
        assert (trust.stat().st_mode & 0o777) == 0o700
    assert (cluster.admin / "trust" / "ca.key").exists()


def test_the_first_trip_visits_every_host_and_comes_home(cluster: Cluster) -> None:
    blocks = howto_blocks()
    (cluster.admin / "trip.py").write_text("\n".join(blocks["agent"]) + "\n")
    [trip] = blocks["trip"]
    shown = cluster.admin_runs(trip).stdout
    addresses = [f"{cluster.testbed.address(h)}:7707" for h in ("h1", "h2", "h3")]
    # What the page says it prints, with the testbed's addresses.
    expected = "\n".join(blocks["briefcase"]) + "\n"
    for example, host in HOSTS.items():
        expected = expected.replace(example, cluster.testbed.address(host))
    assert shown == expected
    assert re.findall(r"\S+:7707", shown.split("SEEN", 1)[1]) == addresses

    # Then each place, from the admin host: each ran one meet, a hop of the trip.
    for line in blocks["status"]:
        host = host_of(line)
        status = cluster.admin_runs(line).stdout
        assert re.search(rf"^place +{re.escape(cluster.testbed.address(host))}:7707,", status,
                         re.M), status
        assert re.search(r"^meets .* 1 ended since start$", status, re.M), status
    assert all(proc.poll() is None for proc in cluster.places.values())


def test_the_printed_unit_runs_the_documented_place(cluster: Cluster) -> None:
    """The page's service step, up to what systemd would do with the unit: the unit it
    writes runs the same tacoma with the same options as the place started by hand."""
    [print_unit, reload, enable] = howto_blocks()["service"]
    assert (reload, enable) == ("systemctl daemon-reload", "systemctl enable --now tacoma-place")
    command, redirect, unit_path = print_unit.partition(" > ")
    assert redirect, print_unit
    host = host_of(command)
    env, argv = cluster.env(cluster.localize(command, host))
    unit = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True,
                          env={**os.environ, **env}).stdout
    target = Path(cluster.localize(unit_path, host)[0])
    target.parent.mkdir(parents=True)
    target.write_text(unit)
    exec_start = re.search(r"^ExecStart=(.*)$", target.read_text(), re.M)
    assert exec_start
    options = cluster.localize(command, host)[2:-1]  # after "tacoma place", before the flag
    assert shlex.split(exec_start.group(1))[-len(options) - 1:] == ["place", *options]
