"""Cabinets: a place's own folders in SQLite, reached through ag_cabinet, kept when agents
leave, through a restart and through a SIGKILL of the place."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import tacoma
from tacoma import Briefcase

from conftest import RunningPlace, launch_place, needs_root, place_fixture

#: The module's own place, not the worker's shared one: its tests name their cabinets
#: plainly (busy, r, both) and look at the list of them all.
place = place_fixture()


def cab(place: RunningPlace, **folders: list[str | bytes]) -> Briefcase:
    return tacoma.meet(place.target("ag_cabinet"), Briefcase(folders), timeout=30)


def test_writes_survive_a_restart(start_place: Callable[..., RunningPlace],
                                  tmp_path: Path) -> None:
    state = tmp_path / "state"
    place = start_place(state_dir=state)
    cab(place, OP=["append"], CABINET=["notes"], LINES=["one", "two"])
    cab(place, OP=["append"], CABINET=["notes"], LINES=["three"], BLOB=[bytes(range(256))])
    assert place.stop() == 0
    again = start_place(state_dir=state)
    result = cab(again, OP=["read"], CABINET=["notes"], FOLDER=["LINES", "BLOB"])
    assert result.text("LINES") == ["one", "two", "three"]
    assert result["BLOB"] == [bytes(range(256))]
    assert cab(again, OP=["list"]).text("CABINETS") == ["notes"]


def test_acknowledged_writes_survive_sigkill_of_the_place(tmp_path: Path) -> None:
    state = tmp_path / "state"
    place = launch_place(state)
    code = "for i in range(50):\n    cabinet_append('log', 'N', str(i))\n"
    tacoma.meet(place.target("ag_python"), {}, code=code, timeout=60)
    place.stop(signal.SIGKILL)
    again = launch_place(state)
    try:
        # Public: the agent did not ask for a private cabinet, so a client may read it.
        result = cab(again, OP=["read"], CABINET=["log"], FOLDER=["N"])
        assert result.text("N") == [str(i) for i in range(50)]
    finally:
        assert again.stop() == 0


def test_concurrent_appends_all_land(place: RunningPlace) -> None:
    async def many() -> None:
        await asyncio.gather(*(
            tacoma.ameet(place.target("ag_cabinet"),
                         {"OP": ["append"], "CABINET": ["busy"], "X": [str(i)]})
            for i in range(40)))

    asyncio.run(many())
    got = cab(place, OP=["read"], CABINET=["busy"], FOLDER=["X"]).text("X")
    assert sorted(got, key=int) == [str(i) for i in range(40)]


def test_replace_remove_and_folders(place: RunningPlace) -> None:
    cab(place, OP=["append"], CABINET=["r"], A=["1", "2"], B=["x"])
    cab(place, OP=["replace"], CABINET=["r"], A=["3"])
    assert cab(place, OP=["read"], CABINET=["r"], FOLDER=["A"]).text("A") == ["3"]
    assert cab(place, OP=["folders"], CABINET=["r"]).text("FOLDERS") == ["A", "B"]
    cab(place, OP=["remove"], CABINET=["r"], FOLDER=["A"])
    assert cab(place, OP=["folders"], CABINET=["r"]).text("FOLDERS") == ["B"]
    cab(place, OP=["remove"], CABINET=["r"])
    assert "r" not in cab(place, OP=["list"]).text("CABINETS")


@pytest.mark.parametrize(("folders", "message"), [
    ({}, "needs OP"),
    ({"OP": ["smash"]}, "unknown cabinet operation"),
    ({"OP": ["read"], "FOLDER": ["A"]}, "needs CABINET"),
    ({"OP": ["read"], "CABINET": ["no/slashes"], "FOLDER": ["A"]}, "bad cabinet name"),
    ({"OP": ["read"], "CABINET": ["c"]}, "needs the folders"),
    ({"OP": ["append"], "CABINET": ["c"], "PRIVATE": ["1"], "A": ["x"]}, "only an agent"),
])
def test_bad_requests_are_typed_errors(place: RunningPlace, folders: dict[str, list[str]],
                                       message: str) -> None:
    with pytest.raises(tacoma.CabinetError, match=message):
        cab(place, **folders)  # type: ignore[arg-type]
    assert cab(place, OP=["list"]) is not None  # the place serves on


def test_private_cabinets_belong_to_their_program(place: RunningPlace) -> None:
    owner = ("import sys\n"
             "if bc.text('DO')[0] == 'write':\n"
             "    cabinet_replace('diary', 'DAY', ['rain'], private=True)\n"
             "bc['READ'] = cabinet_read('diary', 'DAY')\n")
    tacoma.meet(place.target("ag_python"), {"DO": ["write"]}, code=owner)
    # The same program, in a later meet, is the same owner.
    again = tacoma.meet(place.target("ag_python"), {"DO": ["read"]}, code=owner)
    assert again.text("READ") == ["rain"]
    # Another program (one byte different) is not: to it, and to a client, no cabinet has
    # that name (nor are they told of one).
    other = tacoma.meet(place.target("ag_python"), {"DO": ["read"]}, code=owner + "\n")
    assert other.text("READ") == []
    assert cab(place, OP=["read"], CABINET=["diary"], FOLDER=["DAY"]) == Briefcase({"DAY": []})
    assert "diary" not in cab(place, OP=["list"]).text("CABINETS")


def test_a_name_means_the_owners_own_private_cabinet_first(place: RunningPlace) -> None:
    """A program with a private cabinet of a name that a public cabinet has too reads and
    writes its own, with PRIVATE or without; everyone else, the public one."""
    cab(place, OP=["append"], CABINET=["both"], LINES=["public"])
    owner = ("what = bc.text('DO')[0]\n"
             "if what == 'private':\n"
             "    cabinet_append('both', 'DAY', 'mine', private=True)\n"
             "elif what == 'append':\n"
             "    cabinet_append('both', 'DAY', 'more')\n"
             "elif what == 'remove':\n"
             "    cabinet_remove('both')\n"
             "bc['DAY'] = cabinet_read('both', 'DAY')\n"
             "bc['LINES'] = cabinet_read('both', 'LINES')\n"
             "bc['LISTED'] = [x for x in cabinets() if x == 'both']\n")

    def run(what: str) -> Briefcase:
        return tacoma.meet(place.target("ag_python"), {"DO": [what]}, code=owner)

    # Before it has one, the name is the public cabinet's.
    assert run("read").text("LINES") == ["public"]
    # PRIVATE makes its own (never writing into the public one), which it then finds first.
    made = run("private")
    assert (made.text("DAY"), made.text("LINES"), made.text("LISTED")) == \
        (["mine"], [], ["both"])
    assert run("append").text("DAY") == ["mine", "more"]
    assert cab(place, OP=["read"], CABINET=["both"], FOLDER=["DAY", "LINES"]) == \
        Briefcase({"DAY": [], "LINES": [b"public"]})
    assert cab(place, OP=["list"]).text("CABINETS").count("both") == 1
    # Its own removed, the name is the public cabinet's again.
    gone = run("remove")
    assert (gone.text("DAY"), gone.text("LINES")) == ([], ["public"])


def test_installed_agents_own_cabinets_by_name(place: RunningPlace) -> None:
    agents = place.state_dir / "agents"
    (agents / "keeper.py").write_text(
        "cabinet_append('kept', 'X', 'v1', private=True)\n"
        "bc['X'] = cabinet_read('kept', 'X')\n")
    assert tacoma.meet(place.target("keeper"), {}).text("X") == ["v1"]
    # A new version of the installed agent is still the owner.
    (agents / "keeper.py").write_text("bc['X'] = cabinet_read('kept', 'X')\n")
    assert tacoma.meet(place.target("keeper"), {}).text("X") == ["v1"]
    (agents / "other.py").write_text("bc['X'] = cabinet_read('kept', 'X')\n")
    assert tacoma.meet(place.target("other"), {}).text("X") == []


@needs_root
def test_agents_cannot_open_the_database(place: RunningPlace) -> None:
    db = place.state_dir / "cabinets.sqlite3"
    assert db.stat().st_mode & 0o777 == 0o600
    code = (f"try:\n    open({str(db)!r}, 'rb').read(16)\n    bc['R'] = [b'read it']\n"
            "except OSError as exc:\n    bc['R'] = [type(exc).__name__.encode()]\n")
    # Refused by the mode, or not even visible (the mount namespace shows agents only the
    # state directory's work/ and cache/ where it lies below a directory they cannot enter).
    assert tacoma.meet(place.target("ag_python"), {}, code=code)["R"] in (
        [b"PermissionError"], [b"FileNotFoundError"])


def tacoma_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tacoma", *args], capture_output=True,
                          text=True, timeout=60, check=False)


def test_cli_lists_shows_puts_and_removes(place: RunningPlace, tmp_path: Path) -> None:
    state = str(place.state_dir)
    blob = tmp_path / "blob.bin"
    blob.write_bytes(b"\x00\xff")
    out = tacoma_cli("cabinet", "put", "cli", "-f", "T=hello", "-f", f"B=@{blob}",
                     "--state-dir", state)
    assert out.returncode == 0, out.stderr
    assert "appended 2 elements" in out.stdout
    # The running place sees it at once.
    assert cab(place, OP=["read"], CABINET=["cli"], FOLDER=["T"]).text("T") == ["hello"]
    shown = json.loads(tacoma_cli("cabinet", "show", "cli", "--json", "--state-dir",
                                  state).stdout)
    assert shown == {"folders": {"B": [{"base64": "AP8="}], "T": ["hello"]}}
    listed = tacoma_cli("cabinet", "list", "--state-dir", state)
    assert "cli" in listed.stdout and "public" in listed.stdout
    assert tacoma_cli("cabinet", "rm", "cli", "T", "--state-dir", state).returncode == 0
    assert cab(place, OP=["folders"], CABINET=["cli"]).text("FOLDERS") == ["B"]
    assert tacoma_cli("cabinet", "rm", "cli", "--state-dir", state).returncode == 0
    missing = tacoma_cli("cabinet", "show", "cli", "--state-dir", state)
    assert missing.returncode == 2 and "no cabinet 'cli'" in missing.stderr


def test_cli_exit_status_for_a_refused_cabinet_meet(place: RunningPlace) -> None:
    out = tacoma_cli("meet", place.target("ag_cabinet"), "-f", "OP=smash")
    assert out.returncode == 12
    assert "CabinetError: unknown cabinet operation" in out.stderr


def test_an_agent_reaches_the_cabinets_while_its_place_is_full(start_place) -> None:
    """The place's own services take no worker: an admitted agent is not refused them
    when the place runs its --max-meets."""
    p = start_place("--max-meets", "1")
    result = tacoma.meet(p.target("ag_python"), timeout=30,
                         code='cabinet_append("full", "F", b"1")\n'
                              'bc["F"] = cabinet_read("full", "F")')
    assert result["F"] == [b"1"]
