"""Programs named by hash (CODE_HASH, place.stores._codes): sent once, named after that, in every
language and for agents that move; asked for again by a place that lost them; never
usable by a principal that did not send them."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from types import SimpleNamespace
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


#: A comment line in each language, to make a program no other test sent.
COMMENT = {"ag_python": "\n# {}\n", "ag_tcl": "\n# {}\n", "ag_scheme": "\n;; {}\n",
           "ag_c": "\n/* {} */\n"}


def own(program: str, agent: str = "ag_python") -> str:
    """`program` made this test's own: the places here are shared (conftest.SharedPlaces),
    and a place, and this process's connection to it, know each program sent before."""
    return program + COMMENT[agent].format(uuid.uuid4().hex)


def since(before: Any, place: RunningPlace) -> Any:
    """What the place's program store did since `before` (its stats then): each test looks
    at its own meets' effect on a shared place."""
    now = programs_of(place)
    return SimpleNamespace(**{field: getattr(now, field) - getattr(before, field)
                              for field in ("programs", "named", "asked", "saved")})


@pytest.mark.parametrize("agent", sorted(PROGRAMS))
def test_every_language_sends_its_program_once(shared_place: RunningPlace, agent: str
                                               ) -> None:
    program = own(PROGRAMS[agent], agent)
    before = programs_of(shared_place)
    for i in range(3):
        result = tacoma.meet(shared_place.target(agent), {"IN": [str(i)]}, code=program,
                             timeout=120)
        assert result.text("OUT") == [f"{agent.removeprefix('ag_')} {i}"]
        assert result.text("CODE") == [program]  # named on the way back, put back here
    stats = since(before, shared_place)
    assert stats.programs == 1 and stats.named == 2 and stats.asked == 0
    assert stats.saved == 2 * len(program.encode())


def test_a_small_program_is_always_sent(shared_place: RunningPlace) -> None:
    before = programs_of(shared_place)
    for _ in range(2):
        assert tacoma.meet(shared_place.target("ag_python"), code="pass",
                           timeout=60)["CODE"] == [b"pass"]
    assert since(before, shared_place).programs == 0


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


def test_an_agent_that_moves_names_its_program_at_places_that_had_it(
        shared_place: RunningPlace, other_shared_place: RunningPlace) -> None:
    a, b = shared_place, other_shared_place
    roamer = own("\n".join(["# padding line of the roamer"] * PAD)
                 + '\nbc.append("SEEN", place)\ngo_next()\n')
    before = {place.address: programs_of(place) for place in (a, b)}
    result = tacoma.meet(a.target("ag_python"),
                         {"ITINERARY": [b.address, a.address, b.address, a.address]},
                         code=roamer, timeout=120)
    assert result.text("SEEN") == [a.address, b.address, a.address, b.address, a.address]
    assert result.text("CODE") == [roamer]
    # b had the program from a's first hand-over: a's second names it. So does b's second
    # to a (a had it from b's first).
    assert since(before[b.address], b).named >= 1 and since(before[a.address], a).named >= 1


def test_a_hash_is_the_senders_own(shared_place: RunningPlace, tmp_path: Path) -> None:
    """Programs are kept by principal: another identity that names a program it never
    sent is asked for it (CodeUnknown), and learns nothing of who else ran it."""
    place = shared_place
    program = own(PROGRAMS["ag_python"]).encode()
    digest = code_digest([program])
    tacoma.meet(place.target("ag_python"), {"IN": ["mine"]}, code=program, timeout=60)
    # The sender itself may name it (as its client does after the first meet).
    named = tacoma.meet(place.target("ag_python"), {"IN": ["again"], "CODE_HASH": [digest]},
                        timeout=60)
    assert named.text("OUT") == ["python again"]
    other = issue_identity("code-by-hash-other")
    script = textwrap.dedent(f"""
        import tacoma
        tacoma.use_identity({str(other)!r})
        try:
            tacoma.meet({place.target('ag_python')!r}, {{"IN": ["theirs"],
                        "CODE_HASH": [bytes.fromhex({digest.hex()!r})]}}, timeout=60)
        except tacoma.MeetError as exc:
            print(type(exc).__name__, exc)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.stdout.startswith("CodeUnknown the place does not have program"), out


@pytest.mark.parametrize("digest", [b"short", b"\0" * 33])
def test_a_malformed_hash_is_a_protocol_error(shared_place: RunningPlace, digest: bytes
                                              ) -> None:
    place = shared_place
    with pytest.raises(tacoma.MeetError, match="CODE_HASH must hold one 32-byte digest"):
        tacoma.meet(place.target("ag_python"), {"CODE_HASH": [digest]}, timeout=60)
    assert tacoma.meet(place.target("ag_echo"), {"OK": [b"1"]})["OK"] == [b"1"]


def test_the_agent_never_sees_the_hash(shared_place: RunningPlace) -> None:
    place = shared_place
    program = own("\n".join(["# padding"] * PAD) + '\nbc["SAW"] = sorted(bc.folders())\n')
    for _ in range(2):
        result = tacoma.meet(place.target("ag_python"), {"IN": ["x"]}, code=program,
                             timeout=60)
        assert "CODE_HASH" not in result.text("SAW") and "CODE_HASH" not in result


def test_status_shows_the_programs(start_place) -> None:
    place = start_place()  # its own: the status line counts all the place's programs
    for _ in range(2):
        tacoma.meet(place.target("ag_python"), {"IN": ["x"]}, code=PROGRAMS["ag_python"],
                    timeout=60)
    out = subprocess.run([sys.executable, "-m", "tacoma", "status", place.address,
                          "--state-dir", str(place.state_dir)],
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    line = next(line for line in out.stdout.splitlines() if line.startswith("programs "))
    assert "1 kept by hash" in line and "1 meets named theirs" in line, line
