"""Trust across hosts: places on separate network stacks, each with its own identity.

Three network namespaces made for the test (two hosts and a bridge between them, plus a
veth into this one for the client), as tacoma's places would sit on a LAN. Each place has
an identity naming its own address; a moving agent crosses from one to the other over
the places' own authenticated connection and keeps its launcher's principal; a place
serving another's identity is caught by its clients. Needs root (namespaces); skipped
otherwise.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import tacoma
from tacoma.client import current_principal

from conftest import RunningPlace, issue_identity, launch_place

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None
                       or shutil.which("nsenter") is None,
                       reason="network namespaces need root, ip and nsenter"),
]

SUBNET = "10.77.{}.{}"


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


@dataclass
class Hosts:
    """The namespaces: host name -> (netns name, address)."""

    tag: str
    hosts: dict[str, tuple[str, str]]

    def prefix(self, host: str) -> tuple[str, ...]:
        return ("nsenter", f"--net=/var/run/netns/{self.hosts[host][0]}")

    def address(self, host: str) -> str:
        return self.hosts[host][1]


@pytest.fixture(scope="module")
def lan() -> Iterator[Hosts]:
    tag = f"{os.getpid() % 10000:04d}"
    third = os.getpid() % 200 + 20
    bridge = f"tbr{tag}"
    hosts = {"a": (f"ta{tag}", SUBNET.format(third, 1)),
             "b": (f"tb{tag}", SUBNET.format(third, 2))}
    made: list[str] = []
    host_veth = f"vh{tag}"
    try:
        for ns in (bridge, *(n for n, _ in hosts.values())):
            _ip("netns", "add", ns)
            made.append(ns)
        _ip("-n", bridge, "link", "add", "br0", "type", "bridge")
        _ip("-n", bridge, "link", "set", "br0", "up")
        for key, (ns, address) in hosts.items():
            inside, outside = f"v{key}{tag}", f"v{key}{tag}b"
            _ip("link", "add", inside, "type", "veth", "peer", "name", outside)
            _ip("link", "set", inside, "netns", ns)
            _ip("link", "set", outside, "netns", bridge)
            _ip("-n", bridge, "link", "set", outside, "master", "br0", "up")
            _ip("-n", ns, "addr", "add", f"{address}/24", "dev", inside)
            _ip("-n", ns, "link", "set", inside, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        # The client, in this namespace, reaches both through its own veth.
        _ip("link", "add", host_veth, "type", "veth", "peer", "name", f"{host_veth}b")
        _ip("link", "set", f"{host_veth}b", "netns", bridge)
        _ip("-n", bridge, "link", "set", f"{host_veth}b", "master", "br0", "up")
        _ip("addr", "add", f"{SUBNET.format(third, 10)}/24", "dev", host_veth)
        _ip("link", "set", host_veth, "up")
        yield Hosts(tag, hosts)
    finally:
        subprocess.run(["ip", "link", "del", host_veth], capture_output=True, timeout=10)
        for ns in reversed(made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)


@pytest.fixture(scope="module")
def places(lan: Hosts, tmp_path_factory: pytest.TempPathFactory) -> Iterator[
        dict[str, RunningPlace]]:
    started: dict[str, RunningPlace] = {}
    try:
        for host in ("a", "b"):
            identity = issue_identity(f"place-{host}-{lan.tag}", "place",
                                      addresses=(lan.address(host),))
            started[host] = launch_place(
                tmp_path_factory.mktemp(f"host_{host}") / "state", "--identity",
                str(identity), listen=f"{lan.address(host)}:0", prefix=lan.prefix(host))
        yield started
    finally:
        for place in started.values():
            place.stop()


ROAMER = textwrap.dedent("""
    bc.append("SEEN", place + " " + principal)
    go_next()
""")


def test_a_client_meets_places_on_other_hosts(places: dict[str, RunningPlace]) -> None:
    for place in places.values():
        assert tacoma.meet(place.target("ag_echo"), {"OK": [b"1"]}) == {"OK": [b"1"]}


def test_a_moving_agent_keeps_its_launchers_principal_across_hosts(
        places: dict[str, RunningPlace]) -> None:
    a, b = places["a"], places["b"]
    me = current_principal()
    result = tacoma.meet(a.target("ag_python"), {"ITINERARY": [b.address, a.address]},
                         code=ROAMER, timeout=60)
    assert result.text("SEEN") == [f"{a.address} {me}", f"{b.address} {me}",
                                   f"{a.address} {me}"]


def test_an_agents_meet_at_another_host_is_made_for_its_principal(
        places: dict[str, RunningPlace]) -> None:
    a, b = places["a"], places["b"]
    me = current_principal()
    code = (f"r = meet({b.target('ag_python')!r}, "
            "Briefcase(CODE=['bc.append(\"WHO\", principal)']))\n"
            "bc.replace(\"WHO\", r.folder(\"WHO\"))")
    result = tacoma.meet(a.target("ag_python"), code=code, timeout=60)
    assert result.text("WHO") == [me]


def test_a_place_with_another_hosts_identity_is_refused_by_clients(
        lan: Hosts, places: dict[str, RunningPlace], tmp_path: Path) -> None:
    """An impostor on host b serving place-a's identity: its clients check the address."""
    stolen = issue_identity(f"place-a-{lan.tag}", "place", addresses=(lan.address("a"),))
    # Told to listen on b's own address, a place will not even start with a's identity.
    refused = subprocess.run(
        [*lan.prefix("b"), sys.executable, "-m", "tacoma", "place",
         "--listen", f"{lan.address('b')}:0", "--state-dir", str(tmp_path / "s1"),
         "--identity", str(stolen)], capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0
    assert f"not {lan.address('b')}" in refused.stderr
    # On the wildcard address it starts; a client dialling b's address refuses it.
    impostor = launch_place(tmp_path / "s2", "--identity", str(stolen),
                            listen="0.0.0.0:0", prefix=lan.prefix("b"))
    try:
        port = impostor.address.rsplit(":", 1)[1]
        with pytest.raises(tacoma.ConnectError, match="IP address mismatch"):
            tacoma.meet(f"ag_echo@{lan.address('b')}:{port}", {})
    finally:
        impostor.stop()


def test_a_place_on_a_lan_address_needs_an_identity(lan: Hosts, tmp_path: Path) -> None:
    refused = subprocess.run(
        [*lan.prefix("a"), sys.executable, "-m", "tacoma", "place", "--listen",
         f"{lan.address('a')}:0", "--state-dir", str(tmp_path / "s")],
        capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0
    assert "needs an identity" in refused.stderr and "tacoma trust init" in refused.stderr
    assert not (tmp_path / "s").exists()  # it touched nothing
