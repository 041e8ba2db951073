"""The testbed (tacoma.testbed): hosts on separate network stacks, and the faults it makes.

Real namespaces, real places in them (started with nsenter, as a user would), real meets
from this process over the bridge, real packets counted by ping; the CLI is run as a user
runs it. Needs root, ip and nsenter (nft and ping for the loss test); skipped otherwise.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import tacoma
import tacoma.testbed

from conftest import RunningPlace, launch_place, tacoma_cli

USABLE, WHY = tacoma.testbed.Testbed.available()
pytestmark = [pytest.mark.root, pytest.mark.skipif(not USABLE, reason=WHY)]


def existing_names(tag: str) -> list[str]:
    """The namespaces and links of this machine (the caller's namespace) that carry `tag`."""
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                                check=True, timeout=10).stdout.split("\n")
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True,
                           check=True, timeout=10).stdout.split("\n")
    return [line for line in namespaces + links
            if re.search(rf"\btacoma-{re.escape(tag)}-|\btb-{re.escape(tag)}\b", line)]


@pytest.fixture(scope="module")
def places(testbed: tacoma.testbed.Testbed,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, RunningPlace]]:
    """A place on each host, with --insecure (the testbed is a closed network), met in
    plaintext by this process for the module's tests."""
    started: dict[str, RunningPlace] = {}
    tacoma.use_identity(insecure=True)
    try:
        for host in testbed.hosts:
            started[host] = launch_place(
                tmp_path_factory.mktemp(host) / "state", "--insecure",
                listen=f"{testbed.address(host)}:0", prefix=testbed.prefix(host))
        yield started
    finally:
        for place in started.values():
            place.stop()
        tacoma.use_identity()  # the session's default identity again, for later modules


def test_each_host_has_a_network_stack_of_its_own(testbed: tacoma.testbed.Testbed) -> None:
    for host in testbed.hosts:
        shown = subprocess.run([*testbed.prefix(host), "ip", "-o", "-4", "addr", "show"],
                               capture_output=True, text=True, check=True, timeout=10).stdout
        addresses = re.findall(r"inet (\S+)/", shown)
        assert sorted(addresses) == sorted(["127.0.0.1", testbed.address(host)])
    assert testbed.client_address.rsplit(".", 1)[0] == testbed.address("h1").rsplit(".", 1)[0]
    assert testbed.subnet == testbed.client_address.rsplit(".", 1)[0] + ".0/24"


def test_this_process_meets_a_place_on_every_host(places: dict[str, RunningPlace]) -> None:
    for host, place in places.items():
        assert tacoma.meet(place.target("ag_echo"), {"HOST": [host]}).text("HOST") == [host]


ROAMER = textwrap.dedent("""
    bc.append("SEEN", place)
    go_next()
""")


def test_an_agent_hops_from_host_to_host(places: dict[str, RunningPlace]) -> None:
    """Each hop is a place meeting the next over the bridge: the hosts reach each other."""
    h1, h2, h3, h4 = (places[h] for h in ("h1", "h2", "h3", "h4"))
    itinerary = [h2.address, h3.address, h4.address, h1.address]
    result = tacoma.meet(h1.target("ag_python"), {"ITINERARY": itinerary}, code=ROAMER,
                         timeout=60)
    assert result.text("SEEN") == [h1.address, *itinerary]


def test_a_cut_host_cannot_be_met_until_it_is_restored(
        testbed: tacoma.testbed.Testbed, places: dict[str, RunningPlace],
        tmp_path: Path) -> None:
    # A place of its own, so that no connection to it is open (and cached) before the cut.
    place = launch_place(tmp_path / "state", "--insecure",
                         listen=f"{testbed.address('h4')}:0", prefix=testbed.prefix("h4"))
    try:
        testbed.cut("h4")
        try:
            assert testbed.is_cut("h4")
            with pytest.raises(tacoma.ConnectError, match="cannot connect"):
                tacoma.meet(place.target("ag_echo"), {}, connect_timeout=2)
        finally:
            testbed.restore("h4")
        assert not testbed.is_cut("h4")
        assert tacoma.meet(place.target("ag_echo"), {"BACK": ["1"]}).text("BACK") == ["1"]
        # The other hosts never noticed.
        assert tacoma.meet(places["h3"].target("ag_echo"), {"A": ["1"]}).text("A") == ["1"]
    finally:
        assert place.stop() == 0, place.log()


def ping_loss(address: str, count: int) -> int:
    """Percent of `count` pings to `address` (100 a second) that got no answer."""
    done = subprocess.run(["ping", "-q", "-n", "-c", str(count), "-i", "0.01", "-W", "1",
                           address], capture_output=True, text=True, timeout=60)
    match = re.search(r"(\d+(?:\.\d+)?)% packet loss", done.stdout)
    assert match, done.stdout + done.stderr
    return round(float(match.group(1)))


@pytest.mark.skipif(shutil.which("nft") is None or shutil.which("ping") is None,
                    reason="lossy hosts need nft (nftables), and this test ping (iputils-ping)")
def test_a_lossy_host_drops_packets_until_cleared(testbed: tacoma.testbed.Testbed) -> None:
    assert ping_loss(testbed.address("h2"), 20) == 0
    testbed.lossy("h2", 30)
    try:
        # 30% of the requests and 30% of the replies: about 51% of round trips. Fifty
        # pings land outside 5% to 70% with a chance far below one in a million.
        assert 5 <= ping_loss(testbed.address("h2"), 50) <= 70
        assert ping_loss(testbed.address("h3"), 20) == 0  # only h2 is lossy
    finally:
        testbed.clear_loss("h2")
    assert ping_loss(testbed.address("h2"), 50) == 0
    testbed.clear_loss("h2")  # clearing twice is no error


def test_without_nft_a_lossy_host_is_refused_saying_what_to_install(
        testbed: tacoma.testbed.Testbed, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no nft on it (nor anything else)
    assert tacoma.testbed.Testbed.available(loss=True) == (
        False, "a testbed needs ip, nsenter, nft (Debian: apt-get install iproute2 "
               "util-linux nftables)")
    with pytest.raises(tacoma.testbed.TestbedError, match="apt-get install nftables"):
        testbed.lossy("h1", 30)


def test_close_removes_every_namespace_and_link() -> None:
    with tacoma.testbed.Testbed(2) as bed:
        assert len(existing_names(bed.tag)) == 4  # two hosts, the bridge, the caller's link
        assert bed.leftovers() == sorted([bed.namespace("h1"), bed.namespace("h2"),
                                          bed.bridge_namespace, bed.client_link])
    assert existing_names(bed.tag) == []
    assert bed.leftovers() == []
    bed.close()  # closing twice is no error


def test_a_set_up_that_fails_halfway_removes_what_it_made(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An `ip` that refuses to configure h2 (a stand-in put first on PATH), as a kernel
    refusing an address would: the namespaces and links made before are removed."""
    real_ip = shutil.which("ip")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ip").write_text(textwrap.dedent(f"""\
        #!/bin/sh
        case "$2" in *-h2) echo "refused by the test" >&2; exit 1;; esac
        exec {real_ip} "$@"
    """))
    (bin_dir / "ip").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    bed = tacoma.testbed.Testbed(3)
    with pytest.raises(tacoma.testbed.TestbedError, match="refused by the test"):
        bed.up()
    monkeypatch.undo()
    assert existing_names(bed.tag) == []


def test_cleanup_stale_removes_what_a_killed_run_left() -> None:
    code = ("import os, tacoma.testbed\n"
            "bed = tacoma.testbed.Testbed(2).up()\n"
            "print(bed.tag, flush=True)\n"
            "os.kill(os.getpid(), 9)\n")
    killed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    tag = killed.stdout.strip()
    assert len(existing_names(tag)) == 4
    removed = tacoma.testbed.Testbed.cleanup_stale()
    assert existing_names(tag) == []
    assert f"tb-{tag}" in removed and f"tacoma-{tag}-h1" in removed


def test_a_testbed_refuses_hosts_it_does_not_have() -> None:
    bed = tacoma.testbed.Testbed(2)
    assert bed.hosts == ["h1", "h2"]
    with pytest.raises(tacoma.testbed.TestbedError, match="not up"):
        bed.address("h1")
    with pytest.raises(ValueError, match="its hosts are h1 to h2"):
        bed.namespace("h3")
    with pytest.raises(ValueError, match="1 to 253"):
        tacoma.testbed.Testbed(0)


def test_the_cli_brings_a_testbed_up_shows_it_and_takes_it_down(tmp_path: Path) -> None:
    record = tmp_path / "testbed.json"
    # --record goes before the subcommand or after it; the hints repeat it.
    up = tacoma_cli("testbed", "up", "--hosts", "2", "--record", str(record))
    assert up.returncode == 0, up.stderr
    assert f"take it down with: tacoma testbed down --record {record}" in up.stdout
    made = json.loads(record.read_text())
    tag = made["tag"]
    try:
        assert len(existing_names(tag)) == 4
        for host, where in made["hosts"].items():
            assert re.search(rf"{host}\s+{re.escape(where['address'])}\s+namespace "
                             f"{where['namespace']}", up.stdout), up.stdout
        h1 = made["hosts"]["h1"]
        assert (f"nsenter --net=/var/run/netns/{h1['namespace']} tacoma place --listen "
                f"{h1['address']}:7707 --insecure") in up.stdout
        # The testbed outlived the command; its tag names no live process, yet it is no
        # leftover for cleanup_stale.
        tacoma.testbed.Testbed.cleanup_stale()
        assert len(existing_names(tag)) == 4
        again = tacoma_cli("testbed", "--record", str(record), "up")
        assert again.returncode != 0 and "is up already" in again.stderr
        assert f"`tacoma testbed down --record {record}` removes it" in again.stderr
        status = tacoma_cli("testbed", "--record", str(record), "status", "--json")
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["states"] == {"h1": "up", "h2": "up"}
        tacoma.testbed.Testbed.from_record(made).cut("h2")
        shown = tacoma_cli("testbed", "--record", str(record), "status")
        assert re.search(r"h2\s+\S+\s+cut", shown.stdout), shown.stdout
    finally:
        down = tacoma_cli("testbed", "down", "--record", str(record))
    assert down.returncode == 0, down.stderr
    assert existing_names(tag) == []
    assert not record.exists()
    status = tacoma_cli("testbed", "status", "--record", str(record))
    assert status.returncode == 0 and "no testbed is recorded" in status.stdout
    assert f"`tacoma testbed up --record {record}` makes one" in status.stdout
