"""Programs named by hash (CODE_HASH, place.stores._codes): sent once, named after that, in every
language and for agents that move; asked for again by a place that lost them; never
usable by a principal that did not send them."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import tacoma
from tacoma.wire._program import code_digest

from conftest import RunningPlace, issue_identity

PAD = 40  # lines of comment: every program is over CODE_BY_HASH_MIN bytes

#: The same small program in each language, padded past the size worth naming by hash.
PROGRAMS = {
    "ag_python": "\n".join(["# padding line of the python program"] * PAD)
                 + '\nbc["OUT"] = ["python " + bc["IN"][0].decode()]\n',
    "ag_tcl": "\n".join(["# padding line of the tcl program"] * PAD)
              + '\nbc_append_text OUT "tcl [lindex [bc_text IN] 0]"\n',
    "ag_scheme": "\n".join([";; padding line of the scheme program"] * PAD)
                 + '\n(bc-append "OUT" (string-append "scheme " (car (bc-text "IN"))))\n',
    "ag_c": "\n".join(["/* padding line of the c program */"] * PAD) + textwrap.dedent("""
        #include <tacoma.h>
        int main(void) {
            tc_list in;
            if (tc_text(TC_SELF, "IN", &in) != 0 || in.count != 1) tc_fail("no IN");
            tc_append_textf(TC_SELF, "OUT", "c %s", (const char *)in.items[0].data);
            return 0;
        }
    """),
}


def programs_of(place: RunningPlace) -> Any:
    token = (place.state_dir / "admin.token").read_text().strip()
    return tacoma.place_status(place.address, token=token).programs


@pytest.fixture
def fresh(start_place) -> RunningPlace:
    place: RunningPlace = start_place()
    return place


@pytest.mark.parametrize("agent", sorted(PROGRAMS))
def test_every_language_sends_its_program_once(fresh: RunningPlace, agent: str) -> None:
    program = PROGRAMS[agent]
    for i in range(3):
        result = tacoma.meet(fresh.target(agent), {"IN": [str(i)]}, code=program, timeout=120)
        assert result.text("OUT") == [f"{agent.removeprefix('ag_')} {i}"]
        assert result.text("CODE") == [program]  # named on the way back, put back here
    stats = programs_of(fresh)
    assert stats.programs == 1 and stats.named == 2 and stats.asked == 0
    assert stats.saved == 2 * len(program.encode())


def test_a_small_program_is_always_sent(fresh: RunningPlace) -> None:
    for _ in range(2):
        assert tacoma.meet(fresh.target("ag_python"), code="pass", timeout=60)["CODE"] == [
            b"pass"]
    assert programs_of(fresh).programs == 0


def test_a_place_that_restarted_asks_for_the_program_again(start_place,
                                                           tmp_path: Path) -> None:
    place = start_place(state_dir=tmp_path / "p")
    program = PROGRAMS["ag_python"]
    for _ in range(2):
        tacoma.meet(place.target("ag_python"), {"IN": ["x"]}, code=program, timeout=60)
    address = place.address
    place.stop()
    again = start_place(state_dir=tmp_path / "p", listen=address)
    result = tacoma.meet(again.target("ag_python"), {"IN": ["y"]}, code=program, timeout=60)
    assert result.text("OUT") == ["python y"]
    stats = programs_of(again)
    assert stats.asked == 1 and stats.named == 0 and stats.programs == 1


def test_an_agent_that_moves_names_its_program_at_places_that_had_it(start_place) -> None:
    a, b = start_place(), start_place()
    roamer = "\n".join(["# padding line of the roamer"] * PAD) + '\nbc.append("SEEN", place)\n' \
        'go_next()\n'
    result = tacoma.meet(a.target("ag_python"),
                         {"ITINERARY": [b.address, a.address, b.address, a.address]},
                         code=roamer, timeout=120)
    assert result.text("SEEN") == [a.address, b.address, a.address, b.address, a.address]
    assert result.text("CODE") == [roamer]
    # b had the program from a's first hand-over: a's second names it. So does b's second
    # to a (a had it from b's first).
    assert programs_of(b).named >= 1 and programs_of(a).named >= 1


def test_a_hash_is_the_senders_own(fresh: RunningPlace, tmp_path: Path) -> None:
    """Programs are kept by principal: another identity that names a program it never
    sent is asked for it (CodeUnknown), and learns nothing of who else ran it."""
    program = PROGRAMS["ag_python"].encode()
    digest = code_digest([program])
    tacoma.meet(fresh.target("ag_python"), {"IN": ["mine"]}, code=program, timeout=60)
    # The sender itself may name it (as its client does after the first meet).
    named = tacoma.meet(fresh.target("ag_python"), {"IN": ["again"], "CODE_HASH": [digest]},
                        timeout=60)
    assert named.text("OUT") == ["python again"]
    other = issue_identity("code-by-hash-other")
    script = textwrap.dedent(f"""
        import tacoma
        tacoma.use_identity({str(other)!r})
        try:
            tacoma.meet({fresh.target('ag_python')!r}, {{"IN": ["theirs"],
                        "CODE_HASH": [bytes.fromhex({digest.hex()!r})]}}, timeout=60)
        except tacoma.MeetError as exc:
            print(type(exc).__name__, exc)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.stdout.startswith("CodeUnknown the place does not have program"), out


@pytest.mark.parametrize("digest", [b"short", b"\0" * 33])
def test_a_malformed_hash_is_a_protocol_error(fresh: RunningPlace, digest: bytes) -> None:
    with pytest.raises(tacoma.MeetError, match="CODE_HASH must hold one 32-byte digest"):
        tacoma.meet(fresh.target("ag_python"), {"CODE_HASH": [digest]}, timeout=60)
    assert tacoma.meet(fresh.target("ag_echo"), {"OK": [b"1"]})["OK"] == [b"1"]


def test_the_agent_never_sees_the_hash(fresh: RunningPlace) -> None:
    program = "\n".join(["# padding"] * PAD) + '\nbc["SAW"] = sorted(bc.folders())\n'
    for _ in range(2):
        result = tacoma.meet(fresh.target("ag_python"), {"IN": ["x"]}, code=program,
                             timeout=60)
        assert "CODE_HASH" not in result.text("SAW") and "CODE_HASH" not in result


def test_status_shows_the_programs(fresh: RunningPlace) -> None:
    for _ in range(2):
        tacoma.meet(fresh.target("ag_python"), {"IN": ["x"]}, code=PROGRAMS["ag_python"],
                    timeout=60)
    out = subprocess.run([sys.executable, "-m", "tacoma", "status", fresh.address,
                          "--state-dir", str(fresh.state_dir)],
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    line = next(line for line in out.stdout.splitlines() if line.startswith("programs "))
    assert "1 kept by hash" in line and "1 meets named theirs" in line, line
