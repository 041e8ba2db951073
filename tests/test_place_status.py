"""A place in one screen: `tacoma status PLACE` and `tacoma.client.place_status`, against a
real place with a resident, a cabinet and meets that ran."""

from __future__ import annotations

import concurrent.futures
import functools
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import tacoma
from tacoma.client import PlaceStatus, place_status

from conftest import RunningPlace, issue_identity, launch_place, tacoma_cli, wait_until

#: The command as a person with no $TACOMA_PLACE of their own runs it.
cli = functools.partial(tacoma_cli, default_place=False)

RESIDENT = "reside clerk\nafter 120000\n"  # Tcl: resident as clerk, taking no message


@pytest.fixture(scope="module")
def busy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningPlace]:
    """A place that ran three Python meets, keeps a cabinet, and has a resident (clerk)
    with one message waiting in its mailbox."""
    place = launch_place(tmp_path_factory.mktemp("busy"), "--pool-size", "1")
    for _ in range(3):
        tacoma.meet(place.target("ag_python"), code="pass", timeout=60)
    tacoma.meet(place.target("ag_cabinet"), {"OP": ["append"], "CABINET": ["ledger"],
                                             "N": [b"1"]})
    pool = concurrent.futures.ThreadPoolExecutor(1)
    resident = pool.submit(tacoma.meet, place.target("ag_tcl"), code=RESIDENT, timeout=120)
    wait_until(lambda: any(row["name"] == "clerk" for row in place.agents()), 60,
               "the resident")
    tacoma.send(f"clerk@{place.address}", {"NOTE": [b"x" * 1000]})
    yield place
    token = (place.state_dir / "admin.token").read_text().strip()
    tacoma.meet(place.target("ag_admin"), {"OP": ["kill"], "NAME": ["clerk"],
                                           "TOKEN": [token]})
    with pytest.raises(tacoma.AgentKilled):
        resident.result(60)
    pool.shutdown()
    assert place.stop() == 0


def test_the_python_api_sums_the_place_up(busy: RunningPlace) -> None:
    status = place_status(busy.address)  # this user's identity has the admin role
    assert isinstance(status, PlaceStatus)
    assert status.address == busy.address and status.version == tacoma.__version__
    assert status.pid == busy.proc.pid and status.uptime > 0
    assert status.state_dir == str(busy.state_dir)
    pools = {pool.agent: pool for pool in status.pools}
    assert pools["ag_python"].language == "python"
    # --pool-size 1 is the least it keeps: meets that took the last ready worker grew it
    assert 1 <= pools["ag_python"].size <= pools["ag_python"].most == 16
    assert pools["ag_python"].ended >= 3
    assert status.ended >= 3 and status.running == 1  # the resident's meet
    [clerk] = status.residents
    assert clerk.name == "clerk" and clerk.agent == "ag_tcl"
    assert clerk.messages == 1 and clerk.bytes > 1000  # the message it has not taken
    assert status.mailbox_bytes == clerk.bytes and status.mailbox_max_bytes > clerk.bytes
    assert status.cabinets == 1
    # The layers are those the place applies, as doctor reports them for this user.
    doctor = json.loads(cli("doctor", "--json").stdout)["layers"]
    assert [(layer.name, layer.applied) for layer in status.layers] == [
        (row["layer"], row["applied"]) for row in doctor]


def test_the_cli_prints_one_screen(busy: RunningPlace) -> None:
    out = cli("status", busy.address)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    for label in ("place", "up", "isolation", "meets", "mailboxes", "cabinets"):
        assert any(line.startswith(label + " ") for line in text.splitlines()), text
    assert f"tacoma {tacoma.__version__}" in text
    header = next(line for line in text.splitlines() if line.startswith("LANGUAGE"))
    assert header.split() == ["LANGUAGE", "AGENT", "READY", "POOL", "MOST", "ENDED", "MISSED",
                              "WARM", "SERVED", "WARM", "FRESH"]
    python = next(line for line in text.splitlines() if line.startswith("python "))
    assert python.split()[1] == "ag_python" and python.split()[4] == "16"  # --pool-max
    clerk = next(line for line in text.splitlines() if line.startswith("clerk "))
    assert clerk.split()[1:2] == ["ag_tcl"] and clerk.split()[3] == "1"  # one message


def test_the_cli_json_and_the_default_place(busy: RunningPlace) -> None:
    out = cli("status", "--json", env={"TACOMA_PLACE": busy.address})
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["address"] == busy.address
    assert {pool["agent"] for pool in data["pools"]} >= {"ag_python", "ag_tcl"}
    assert data["meets"]["ended"] >= 3 and data["cabinets"] == 1
    assert [(r["name"], r["messages"]) for r in data["residents"]] == [("clerk", 1)]


def test_a_status_needs_the_admin_role_or_the_token(busy: RunningPlace,
                                                    tmp_path: Path) -> None:
    clerk = str(issue_identity("status-clerk"))  # no admin role
    refused = cli("status", busy.address, "--identity", clerk, "--state-dir",
                         str(tmp_path))
    assert refused.returncode == 15, refused.stderr
    assert "NotAllowed" in refused.stderr
    allowed = cli("status", busy.address, "--identity", clerk, "--state-dir",
                         str(busy.state_dir))
    assert allowed.returncode == 0, allowed.stderr


def test_a_meet_id_is_still_a_meets_status(busy: RunningPlace) -> None:
    meet_id = tacoma.meet(busy.target("ag_python"), code="bc['X'] = [b'1']", mode="async")
    # "--": an id may begin with "-", and would be read as an option.
    out = cli("status", "--wait", "30s", "--json", "--", f"{meet_id}@{busy.address}")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["state"] == "done"
    wait = cli("status", busy.address, "--wait", "5")
    assert wait.returncode == 2 and "--wait waits for a meet" in wait.stderr
    neither = cli("status", "justanid")
    assert neither.returncode == 2 and "neither a place" in neither.stderr


def test_its_reprs_are_short_and_its_html_escaped(busy: RunningPlace) -> None:
    status = place_status(busy.address)
    short = repr(status)
    assert short.startswith(f"PlaceStatus({busy.address}, tacoma ") and len(short) < 200
    assert "\n" not in short
    assert str(status).splitlines()[0].startswith("place ")
    page = status._repr_html_()
    assert "<table>" in page and "ag_python" in page and "clerk" in page
    hostile = PlaceStatus.from_json({**status.data, "state_dir": "<script>x</script>"})
    assert "<script>" not in hostile._repr_html_()


def test_a_newer_places_pools_are_read_for_what_this_client_knows(busy: RunningPlace) -> None:
    """A place newer than the client may say more of each pool: the client reads the rest."""
    status = place_status(busy.address)
    data = {**status.data, "pools": [{**row, "said_by_a_newer_place": 1}
                                     for row in status.data["pools"]]}
    newer = PlaceStatus.from_json(data)
    assert [p.agent for p in newer.pools] == [p.agent for p in status.pools]
    assert all(p.runs_in == "workers" for p in newer.pools)
