"""Trust across hosts: places on separate network stacks, each with its own identity.

A testbed of two hosts (tacoma.testbed: a network namespace each, on a bridge in a
namespace of its own, which this process reaches through a veth of its own), as tacoma's
places would sit on a LAN. Each place has an identity naming its own address; a moving
agent crosses from one to the other over the places' own authenticated connection and
keeps its launcher's principal; a place serving another's identity is caught by its
clients. Needs root, ip and nsenter (namespaces); skipped otherwise.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import tacoma
import tacoma.testbed
from tacoma.client import current_principal

from conftest import RunningPlace, issue_identity, launch_place

USABLE, WHY = tacoma.testbed.Testbed.available()
pytestmark = [pytest.mark.root, pytest.mark.skipif(not USABLE, reason=WHY)]

#: The two hosts, by the testbed's names for them.
A, B = "h1", "h2"


@pytest.fixture(scope="module")
def lan() -> Iterator[tacoma.testbed.Testbed]:
    with tacoma.testbed.Testbed(2) as bed:
        yield bed


@pytest.fixture(scope="module")
def places(lan: tacoma.testbed.Testbed, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[dict[str, RunningPlace]]:
    started: dict[str, RunningPlace] = {}
    try:
        for host in (A, B):
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
    a, b = places[A], places[B]
    me = current_principal()
    result = tacoma.meet(a.target("ag_python"), {"ITINERARY": [b.address, a.address]},
                         code=ROAMER, timeout=60)
    assert result.text("SEEN") == [f"{a.address} {me}", f"{b.address} {me}",
                                   f"{a.address} {me}"]


def test_an_agents_meet_at_another_host_is_made_for_its_principal(
        places: dict[str, RunningPlace]) -> None:
    a, b = places[A], places[B]
    me = current_principal()
    child = 'bc.append("WHO", principal)'
    code = (f"r = meet({b.target('ag_python')!r}, Briefcase(CODE=[{child!r}]))\n"
            "bc.replace(\"WHO\", r.folder(\"WHO\"))")
    # The child's program is named in the passport: it runs at b for its principal.
    result = tacoma.meet(a.target("ag_python"), code=code, timeout=60, programs=[child])
    assert result.text("WHO") == [me]
    # A program the passport does not name is refused there.
    with pytest.raises(tacoma.AgentFailed, match="NotAuthorized"):
        tacoma.meet(a.target("ag_python"), code=code, timeout=60)


def test_a_place_with_another_hosts_identity_is_refused_by_clients(
        lan: tacoma.testbed.Testbed, places: dict[str, RunningPlace], tmp_path: Path) -> None:
    """An impostor on host b serving place-a's identity: its clients check the address."""
    stolen = issue_identity(f"place-{A}-{lan.tag}", "place", addresses=(lan.address(A),))
    # Told to listen on b's own address, a place will not even start with a's identity.
    refused = subprocess.run(
        [*lan.prefix(B), sys.executable, "-m", "tacoma", "place",
         "--listen", f"{lan.address(B)}:0", "--state-dir", str(tmp_path / "s1"),
         "--identity", str(stolen)], capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0
    assert f"not {lan.address(B)}" in refused.stderr
    # On the wildcard address it starts; a client dialling b's address refuses it.
    impostor = launch_place(tmp_path / "s2", "--identity", str(stolen),
                            listen="0.0.0.0:0", prefix=lan.prefix(B))
    try:
        port = impostor.address.rsplit(":", 1)[1]
        with pytest.raises(tacoma.ConnectError, match="IP address mismatch"):
            tacoma.meet(f"ag_echo@{lan.address(B)}:{port}", {})
    finally:
        impostor.stop()


def test_a_place_on_a_lan_address_needs_an_identity(lan: tacoma.testbed.Testbed,
                                                     tmp_path: Path) -> None:
    refused = subprocess.run(
        [*lan.prefix(A), sys.executable, "-m", "tacoma", "place", "--listen",
         f"{lan.address(A)}:0", "--state-dir", str(tmp_path / "s")],
        capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0
    assert "needs an identity" in refused.stderr and "tacoma trust init" in refused.stderr
    assert not (tmp_path / "s").exists()  # it touched nothing
