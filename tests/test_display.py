"""How tacoma's values show themselves to a person: reprs, notebook HTML, tracebacks in a
notebook, progress bars. Bounded whatever the value holds, escaped, and lazy to import."""

from __future__ import annotations

import html
import io
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import tacoma
from tacoma.display import Progress
from tacoma.display.progress import where
from tacoma.wire import CODE, CODE_NAME, Briefcase

HERE = Path(__file__).parent


# ------------------------------------------------------------------------- briefcase repr
def test_a_small_briefcase_reprs_as_it_is_built() -> None:
    bc = Briefcase(A=[b"x"], B=[])
    assert repr(bc) == "Briefcase(A=[b'x'], B=[])"
    assert eval(repr(bc), {"Briefcase": Briefcase}) == bc  # noqa: S307 - our own repr
    assert repr(Briefcase()) == "Briefcase()"


def test_the_repr_summarises_programs_binary_and_long_folders() -> None:
    bc = Briefcase({CODE: ["x = 1\n" * 50], "NAME": ["world"],
                    "PHOTO": [b"\xff\xd8\xff\xe0" + bytes(48_207)],
                    "LOG": [f"line {i}" for i in range(10_000)],
                    "LONG": ["the tromsø place " * 100]})
    shown = repr(bc)
    assert shown.startswith("Briefcase(CODE=[<program, 300 B>], NAME=[b'world'], ")
    assert "PHOTO=[<48.2 kB binary>]" in shown
    assert "LOG=[b'line 0', b'line 1', b'line 2', ... 9,997 more]" in shown
    assert re.search(r"LONG=\[<1\.8 kB: b'the troms.*'\.\.\.>\]", shown)
    assert len(shown) < 300


def test_the_repr_is_bounded_however_big_the_briefcase() -> None:
    bc = Briefcase({f"F{i}": [b"x" * 1_000_000] * 100 for i in range(100)})
    assert len(repr(bc)) < 1500
    assert repr(bc).endswith("... 90 more folders)")


# ------------------------------------------------------------------------- briefcase html
def test_a_50_mb_briefcase_shows_in_a_few_kilobytes() -> None:
    bc = Briefcase(TEXT=[b"a" * 50_000_000], BINARY=[b"\x00\x01" * 25_000_000],
                   MANY=[b"x"] * 10_000)
    shown = bc._repr_html_()
    assert len(shown) < 10_000
    assert "50.0 MB" in shown
    assert "00 01 00 01 00 01 00 01 00 01 00 01 00 01 00 01 ..." in shown  # 16 bytes, hex
    assert "and 9,990 more" in shown
    assert "Briefcase: 3 folders, 10,002 elements, 100.0 MB" in shown


def test_the_html_is_bounded_in_folders_too() -> None:
    bc = Briefcase({f"F{i}": [b"x"] for i in range(10_000)})
    shown = bc._repr_html_()
    assert len(shown) < 20_000
    assert "and 9,950 more folders" in shown


def test_the_html_escapes_names_and_elements() -> None:
    bc = Briefcase({"<script>": ["<img src=x onerror=alert(1)>"],
                    CODE: ["print('</pre><script>alert(2)</script>')"]})
    shown = bc._repr_html_()
    assert "<script>" not in shown and "<img" not in shown
    assert html.escape("<img src=x onerror=alert(1)>") in shown
    assert "&lt;/pre&gt;&lt;script&gt;" in shown


def test_the_program_is_folded_and_named() -> None:
    source = "for name in bc['NAME']:\n    pass\n" * 1000
    bc = Briefcase({CODE: [source], CODE_NAME: ["hello.py"], "NAME": ["world"]})
    shown = bc._repr_html_()
    folded = re.search(r"<details><summary>(.*?)</summary><pre[^>]*>(.*?)</pre></details>",
                       shown, re.S)
    assert folded is not None
    assert folded.group(1) == "program hello.py, 33.0 kB"
    program = html.unescape(folded.group(2))
    assert len(program) <= 4004 and program.endswith("\n...")  # the first 4,000 characters
    assert Briefcase()._repr_html_().count("Briefcase: empty") == 1


# ------------------------------------------------------------------- errors in a notebook
def test_a_meet_error_renders_the_agents_traceback_after_its_line() -> None:
    try:
        tacoma.meet("ag_python", code="def f():\n    return 1 / 0\nf()\n", timeout=60)
    except tacoma.AgentFailed as exc:
        lines = exc._render_traceback_()
    else:
        pytest.fail("the agent did not fail")
    text = "\n".join(lines)
    error = lines.index("AgentFailed: ZeroDivisionError: division by zero")
    assert lines[error + 1] == "Traceback (most recent call last):"  # the agent's own
    assert "return 1 / 0" in text[text.index(lines[error]):]
    # The caller's frame is kept (this test), tacoma's and asyncio's are left out.
    assert "test_display.py" in text[:text.index(lines[error])]
    assert "tacoma/client" not in text and "concurrent/futures" not in text


def test_an_error_without_detail_renders_its_line() -> None:
    exc = tacoma.MeetTimeout("meet ag_x did not finish")
    assert exc._render_traceback_() == ["MeetTimeout: meet ag_x did not finish"]
    remote = tacoma.wire._errors.error_from_wire("limit-exceeded", "too big", "")
    assert remote._render_traceback_() == ["MeetError: too big"]  # not a private class name


# -------------------------------------------------------------------------- traced meets
def test_traced_table_prints_as_the_readme_says(place, capsys: pytest.CaptureFixture[str],
                                                ) -> None:
    traced = tacoma.trace(place.target("ag_python"), code="pass")
    assert traced.table() is None
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].split() == ["side", "step", "µs"]
    assert printed[1].split()[:2] == ["client", "marshal"]
    assert printed[-1].split()[0] == "total"
    assert str(traced) == "\n".join(printed)
    assert repr(traced).startswith("Traced(total=") and len(repr(traced)) < 200


def test_traced_html_has_the_table_and_a_bar_per_step(place) -> None:
    traced = tacoma.trace(place.target("ag_python"), code="pass")
    shown = traced._repr_html_()
    assert "<table>" in shown and "<svg" in shown
    assert shown.count("<rect") == len(traced.steps)
    assert "worker run" in shown and "total" in shown


# ---------------------------------------------------------------- local places, statuses
def test_local_places_show_their_addresses_and_processes() -> None:
    with tacoma.local_places(1) as places:
        assert repr(places) == f"LocalPlaces(1 places, running: {places.addresses[0]})"
        shown = places._repr_html_()
        assert places.addresses[0] in shown and str(places.processes[0].pid) in shown
    assert "exited (0)" in repr(places)


def test_a_meet_status_shows_its_result_or_its_error(place) -> None:
    done_id = tacoma.meet(place.target("ag_python"), code="bc['X'] = ['<b>1</b>']",
                          mode="async")
    done = tacoma.status(f"{done_id}@{place.address}", wait=30)
    assert repr(done).startswith(f"MeetStatus({done_id}@{place.address}: done, ag_python")
    assert "&lt;b&gt;1&lt;/b&gt;" in done._repr_html_()
    failed_id = tacoma.meet(place.target("ag_python"), code="1 / 0", mode="async")
    failed = tacoma.status(f"{failed_id}@{place.address}", wait=30)
    assert "error=AgentFailed: ZeroDivisionError" in repr(failed)
    assert "ZeroDivisionError" in failed._repr_html_()


# ---------------------------------------------------------------- many meets, progress
def test_results_waits_for_many_meets_in_order(place) -> None:
    code = "bc['SQUARE'] = [str(int(bc.text('N')[0]) ** 2)]"
    ids = [tacoma.meet(place.target("ag_python"), {"N": [str(n)]}, code=code, mode="async")
           for n in range(8)]
    got = tacoma.results([f"{meet_id}@{place.address}" for meet_id in ids], timeout=120)
    assert [r.text("SQUARE") for r in got if isinstance(r, Briefcase)] == \
        [[str(n * n)] for n in range(8)]


def test_results_raises_or_returns_the_errors(place) -> None:
    ok = tacoma.meet(place.target("ag_python"), code="pass", mode="async")
    bad = tacoma.meet(place.target("ag_python"), code="1 / 0", mode="async")
    targets = [f"{ok}@{place.address}", f"{bad}@{place.address}"]
    with pytest.raises(tacoma.AgentFailed, match="ZeroDivisionError"):
        tacoma.results(targets)
    both = tacoma.results(targets, return_exceptions=True)
    assert isinstance(both[0], Briefcase) and isinstance(both[1], tacoma.AgentFailed)


def test_progress_is_silent_in_a_pipe_unless_asked() -> None:
    out = io.StringIO()
    with Progress(3, "work", file=out) as progress:
        progress.note("a note")
        progress.advance(3)
    assert out.getvalue() == ""
    with Progress(3, "work", file=out, show=True) as progress:
        progress.update(description="step one")
        progress.note("a note")
        progress.advance(3)
    lines = out.getvalue().splitlines()
    assert lines[:2] == ["step one", "a note"]
    assert lines[2].startswith("work: 3 of 3 done, ")  # the title, not the last step
    assert where(io.StringIO(), show=False) == "off"


def test_progress_draws_a_bar_in_a_terminal() -> None:
    main, secondary = os.openpty()
    chunks: list[bytes] = []

    def drain() -> None:  # read as it is drawn: a pty holds only a few KiB unread
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # EIO: the terminal's last writer closed it
                return
            if not chunk:
                return
            chunks.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    with open(secondary, "w") as terminal:
        assert where(terminal) == "terminal"
        with Progress(2, "work", file=terminal) as progress:
            progress.note("halfway")
            progress.advance(2)
    reader.join(timeout=10)
    os.close(main)
    drawn = b"".join(chunks).decode()
    assert "halfway" in drawn and "2/2" in drawn and "━" in drawn


def test_the_blocking_results_shows_lines_when_asked(place) -> None:
    code = (f"import tacoma\nids = [tacoma.meet({place.target('ag_echo')!r}, mode='async') "
            f"for _ in range(3)]\n"
            f"tacoma.results([i + '@{place.address}' for i in ids], progress=True)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)
    assert done.stderr.strip().startswith("meets ended: 3 of 3 done, ")


# ------------------------------------------------------------------------- import costs
def test_tacoma_imports_neither_ipython_nor_rich() -> None:
    code = ("import sys, tacoma, tacoma.client, tacoma.display, tacoma.wire\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('IPython', 'rich')))")
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True,
                         check=True, timeout=60, cwd=HERE.parent)
    assert out.stdout.strip() == "[]", out.stderr
