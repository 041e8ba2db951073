"""What agents and places say reaches a person's terminal escaped, and a result holding a
lazy folder prints as its reference, fetched by nobody.

The commands run for real (`python -m tacoma ...`) against a real place, with agents in
every language that fail with, or return folders holding, a title change (OSC 0), a
clipboard write (OSC 52), a cleared screen (CSI 2J), a carriage return and a bidi override;
nothing but newlines of all that may reach stdout or stderr raw, and the escaped text must
be there to read. What a real place cannot be made to say (a hostile place's status, its
`tacoma ps` rows) is fed to the renderers directly, as are the notebook's views.
"""

from __future__ import annotations

import io
import json
import socket
import textwrap
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tacoma
from tacoma.wire._briefcase import LAZY, Briefcase
from tacoma.wire._lazy import Ref
from tacoma.wire._text import escape

from conftest import RunningPlace, issue_identity, tacoma_cli, wait_until

LANGUAGES = ("ag_python", "ag_tcl", "ag_scheme", "ag_c")
SOURCE = {"ag_python": "py", "ag_tcl": "tcl", "ag_scheme": "scm", "ag_c": "c"}

#: A window title, a clipboard write, a cleared screen, a carriage return, a bidi override.
HOSTILE = "\x1b]0;owned\x07\x1b]52;c;eA==\x07\x1b[2J\r\u202eevil"
#: What a person must see of it instead.
SHOWN = "\\x1b]0;owned\\x07\\x1b]52;c;eA==\\x07\\x1b[2J\\r\\u202eevil"


def acts(char: str) -> bool:
    """Whether a terminal would act on `char` (or reorder text around it)."""
    return char != "\n" and unicodedata.category(char)[0] in "CZ" and char != " "


def assert_clean(*texts: str) -> None:
    raw = sorted({f"U+{ord(c):04X}" for text in texts for c in text if acts(c)})
    assert not raw, f"raw control characters reached the output: {raw}\n{texts}"


def literal(agent: str, text: str) -> str:
    """`text` as a string literal of the agent's language (its own escapes, so that the
    program's source is plain ASCII)."""
    if agent == "ag_python":
        return ascii(text)
    if agent == "ag_tcl":  # \uXXXX for everything but letters and digits: no [ ] $ to substitute
        return '"' + "".join(c if c.isascii() and c.isalnum() else f"\\u{ord(c):04x}"
                             for c in text) + '"'
    if agent == "ag_scheme":
        return f"(list->string (map integer->char '({' '.join(str(ord(c)) for c in text)})))"
    return '"' + "".join(f"\\{byte:03o}" for byte in text.encode()) + '"'  # C: octal bytes


def failing(agent: str) -> str:
    """A program that fails with HOSTILE as its message, as its language fails."""
    message = literal(agent, HOSTILE)
    return {
        "ag_python": f"raise Exception({message})\n",
        "ag_tcl": f"error {message}\n",
        "ag_scheme": f"(error {message})\n",
        "ag_c": f'#include <tacoma.h>\nint main(void) {{ tc_fail("%s", {message}); }}\n',
    }[agent]


def returning(agent: str) -> str:
    """A program that ends holding folder "N" + HOSTILE, of one element: HOSTILE, a
    newline, and a second line."""
    name, value = literal(agent, "N" + HOSTILE), literal(agent, HOSTILE + "\nsecond line")
    return {
        "ag_python": f"bc.append({name}, {value})\n",
        "ag_tcl": f"bc_append_text {name} {value}\n",
        "ag_scheme": f"(bc-append {name} {value})\n",
        "ag_c": "#include <tacoma.h>\nint main(void) { tc_append_text(TC_SELF, "
                f"{name}, {value}); return 0; }}\n",
    }[agent]


#: Programs that end holding folder N (1,000 x's and a y) made lazy: kept by their place.
ENDS_LAZY = {
    "ag_python": 'bc["N"] = [b"x" * 1000, b"y"]\nbc.lazy("N")\n',
    "ag_tcl": "bc_append_text N [string repeat x 1000]\nbc_append_text N y\nbc_lazy N\n",
    "ag_scheme": '(bc-append "N" (make-string 1000 #\\x))\n(bc-append "N" "y")\n'
                 '(bc-lazy "N")\n',
    "ag_c": textwrap.dedent("""
        #include <string.h>
        #include <tacoma.h>
        int main(void) {
            char xs[1001];
            memset(xs, 'x', 1000);
            xs[1000] = 0;
            tc_append_text(TC_SELF, "N", xs);
            tc_append_text(TC_SELF, "N", "y");
            if (tc_lazy(TC_SELF, "N") != 0) tc_fail("%s", tc_error());
            return 0;
        }
    """),
}


def program(tmp_path: Path, agent: str, source: str, stem: str = "agent") -> Path:
    path = tmp_path / f"{stem}.{SOURCE[agent]}"
    path.write_text(source)
    return path


# ------------------------------------------------------------------------ tacoma meet
@pytest.mark.parametrize("agent", LANGUAGES)
def test_an_agents_error_is_shown_escaped(place: RunningPlace, tmp_path: Path,
                                          agent: str) -> None:
    code = program(tmp_path, agent, failing(agent))
    out = tacoma_cli("meet", place.target(agent), "--code", str(code))
    assert out.returncode == 5, out
    assert_clean(out.stdout, out.stderr)
    first = out.stderr.splitlines()[0]
    assert first.startswith("tacoma: AgentFailed: ") and SHOWN in first, out.stderr
    # --json: the exact message, as JSON escapes; the person's lines on stderr, escaped.
    out = tacoma_cli("meet", place.target(agent), "--code", str(code), "--json")
    assert out.returncode == 5, out
    assert_clean(out.stdout, out.stderr)
    error = json.loads(out.stdout)["error"]
    assert error["kind"] == "AgentFailed" and HOSTILE in error["message"], error


@pytest.mark.parametrize("agent", LANGUAGES)
def test_an_agents_folders_are_shown_escaped(place: RunningPlace, tmp_path: Path,
                                             agent: str) -> None:
    code = program(tmp_path, agent, returning(agent))
    out = tacoma_cli("meet", place.target(agent), "--code", str(code))
    assert out.returncode == 0, out
    assert_clean(out.stdout, out.stderr)
    assert f"N{SHOWN} (1 element)\n  {SHOWN}\n  second line\n" in out.stdout, out.stdout
    out = tacoma_cli("meet", place.target(agent), "--code", str(code), "--json")
    assert out.returncode == 0, out
    assert json.loads(out.stdout)["folders"]["N" + HOSTILE] == [HOSTILE + "\nsecond line"]


def test_a_newline_in_a_message_does_not_make_a_line_of_ours(place: RunningPlace,
                                                             tmp_path: Path) -> None:
    code = program(tmp_path, "ag_python", "fail('x\\ntacoma: hint: run this')\n")
    out = tacoma_cli("meet", place.target("ag_python"), "--code", str(code))
    assert out.returncode == 5, out
    assert out.stderr.splitlines()[0] == "tacoma: AgentFailed: x\\ntacoma: hint: run this"


# ------------------------------------------------------------------------ tacoma status
@pytest.mark.parametrize("agent", LANGUAGES)
def test_a_failed_async_meets_status_is_shown_escaped(place: RunningPlace, tmp_path: Path,
                                                      agent: str) -> None:
    code = program(tmp_path, agent, failing(agent))
    started = tacoma_cli("meet", place.target(agent), "--code", str(code), "--async")
    assert started.returncode == 0, started
    meet_id = started.stdout.strip()
    out = tacoma_cli("status", f"{meet_id}@{place.address}", "--wait", "60")
    assert out.returncode == 5, out
    assert_clean(out.stdout, out.stderr)
    assert f"meet {meet_id} at {place.address}: failed ({agent})" in out.stdout
    assert any(line.startswith("tacoma: AgentFailed: ") and SHOWN in line
               for line in out.stderr.splitlines()), out.stderr
    out = tacoma_cli("status", f"{meet_id}@{place.address}", "--json")
    assert out.returncode == 5, out
    assert_clean(out.stdout, out.stderr)
    assert HOSTILE in json.loads(out.stdout)["error"]["message"]


def test_a_done_async_meets_folders_are_shown_escaped(place: RunningPlace,
                                                      tmp_path: Path) -> None:
    code = program(tmp_path, "ag_tcl", returning("ag_tcl"))
    started = tacoma_cli("meet", place.target("ag_tcl"), "--code", str(code), "--async")
    meet_id = started.stdout.strip()
    out = tacoma_cli("status", f"{meet_id}@{place.address}", "--wait", "60")
    assert out.returncode == 0, out
    assert_clean(out.stdout, out.stderr)
    assert f"N{SHOWN} (1 element)\n  {SHOWN}\n" in out.stdout


def test_a_places_status_is_shown_clean(place: RunningPlace) -> None:
    out = tacoma_cli("status", place.address, "--state-dir", str(place.state_dir))
    assert out.returncode == 0, out
    assert_clean(out.stdout, out.stderr)
    assert out.stdout.startswith(f"place         {place.address}, tacoma ")


def poisoned(value: Any) -> Any:
    """`value` (a place's status, as JSON) with HOSTILE in every string it holds."""
    if isinstance(value, str):
        return HOSTILE + value
    if isinstance(value, list):
        return [poisoned(v) for v in value]
    if isinstance(value, dict):
        return {k: poisoned(v) for k, v in value.items()}
    return value


def test_a_hostile_places_status_is_shown_escaped(place: RunningPlace) -> None:
    from tacoma.client._place_status import PlaceStatus, place_status

    token = (place.state_dir / "admin.token").read_text().strip()
    data = dict(place_status(place.address, token=token).data)
    # Every part of the status that names something, filled in as a place could.
    data.update(installed=["mine"], unavailable=["cobol"],
                trusted=[{"name": "fast", "meets": 1, "problem": "no module"}],
                residents=[{"name": "echo", "agent": "ag_python", "meet": "m" * 16,
                            "messages": 1, "bytes": 10, "received": 2, "age": 3.0}])
    layer = data["layers"][0]
    data["layers"] = [{**layer, "applied": False}, *data["layers"][1:]]
    hostile = PlaceStatus.from_json(poisoned(data))
    out = io.StringIO()
    hostile.show(out)
    for shown in (out.getvalue(), str(hostile), repr(hostile), hostile._repr_html_()):
        assert_clean(shown)
        assert SHOWN in shown
    text = out.getvalue()
    for line in ("place         " + SHOWN, "state         " + SHOWN, "not applied   " + SHOWN,
                 "installed     " + SHOWN, "trusted       " + SHOWN, "cannot run    " + SHOWN):
        assert line in text, line
    assert text.count(SHOWN + "echo") == 1 and text.count(SHOWN + "ag_python") >= 2
    assert hostile.data == poisoned(data)  # the data itself, exact


# ------------------------------------------------------------------------ ps, send, kill
def resident(agent: str) -> str:
    """A program that stays resident as `hostile` and answers every request with folder
    "N" + HOSTILE holding HOSTILE."""
    name, value = literal(agent, "N" + HOSTILE), literal(agent, HOSTILE)
    return {
        "ag_python": textwrap.dedent(f"""
            reside("hostile")
            while (m := receive()) is not None:
                reply(m, {{{name}: [{value}]}})
        """),
        "ag_tcl": textwrap.dedent(f"""
            reside hostile
            while 1 {{
                set m [receive]
                if {{$m eq {{}}}} break
                reply $m [dict create {name} [list [encoding convertto utf-8 {value}]]]
            }}
        """),
        "ag_scheme": textwrap.dedent(f"""
            (reside "hostile")
            (let loop ()
              (let ((m (receive)))
                (when m
                  (reply m (list (cons {name} (list {value}))))
                  (loop))))
        """),
        "ag_c": textwrap.dedent(f"""
            #include <tacoma.h>
            int main(void) {{
                if (tc_reside("hostile") != 0) tc_fail("reside: %s", tc_error());
                for (;;) {{
                    tc_bc m = tc_receive(-1);
                    if (m == TC_ERROR) tc_fail("receive: %s", tc_error());
                    if (m == 0) return 0;
                    tc_bc r = tc_new();
                    tc_append_text(r, {name}, {value});
                    if (tc_reply(m, r) != 0) tc_fail("reply: %s", tc_error());
                    tc_free(r);
                    tc_free(m);
                }}
            }}
        """),
    }[agent]


@pytest.fixture(scope="module")
def alice() -> str:
    """alice's identity (a file of the tests' CA), an administrator of the place."""
    return str(issue_identity("alice", "client", "admin"))


@pytest.fixture(scope="module")
def mallory() -> str:
    return str(issue_identity("mallory"))


@pytest.mark.parametrize("agent", LANGUAGES)
def test_what_mallorys_resident_says_reaches_alice_escaped(
        place: RunningPlace, tmp_path: Path, alice: str, mallory: str, agent: str) -> None:
    """mallory's resident answers alice's request with escape sequences; alice, the place's
    administrator, lists it (`tacoma ps`) and stops it (`tacoma kill`)."""
    code = program(tmp_path, agent, resident(agent))
    started = tacoma_cli("meet", place.target(agent), "--code", str(code), "--async",
                         "--timeout", "300", "--identity", mallory)
    assert started.returncode == 0, started
    meet_id = started.stdout.strip()
    wait_until(lambda: any(r["name"] == "hostile" for r in place.agents()),
               what="mallory's resident")
    try:
        out = tacoma_cli("send", f"hostile@{place.address}", "-f", "X=1", "--request",
                         "--identity", alice)
        assert out.returncode == 0, out
        assert_clean(out.stdout, out.stderr)
        assert f"N{SHOWN} (1 element)\n  {SHOWN}\n" in out.stdout, out.stdout
        out = tacoma_cli("ps", place.address, "--identity", alice)
        assert out.returncode == 0, out
        assert_clean(out.stdout, out.stderr)
        assert meet_id in out.stdout and " hostile " in out.stdout
    finally:
        out = tacoma_cli("kill", f"hostile@{place.address}", "--identity", alice)
    assert out.returncode == 0, out
    assert_clean(out.stdout, out.stderr)
    assert out.stdout == f"killed hostile (meet {meet_id}) at {place.address}\n"


def test_a_resident_name_cannot_carry_control_characters(place: RunningPlace,
                                                         tmp_path: Path) -> None:
    """So a real place's `tacoma ps` never shows one; its rows are escaped all the same."""
    code = program(tmp_path, "ag_python", f"reside({HOSTILE!a})\n")
    out = tacoma_cli("meet", place.target("ag_python"), "--code", str(code))
    assert out.returncode == 5, out
    assert_clean(out.stdout, out.stderr)
    assert "bad resident name" in out.stderr


def test_ps_rows_from_a_hostile_place_are_shown_escaped(
        capsys: pytest.CaptureFixture[str]) -> None:
    from tacoma.cli._admin import agents_table

    agents_table([{"meet": HOSTILE, "name": HOSTILE, "agent": HOSTILE, "language": HOSTILE,
                   "pid": 1, "processes": 1, "age": 1.0, "cpu": 0.5, "rss": 2**20,
                   "network": HOSTILE, "mailbox": 0, "principal": HOSTILE}])
    out = capsys.readouterr().out
    assert_clean(out)
    assert out.count(SHOWN) == 6


# ------------------------------------------------------------------------ the renderers
def test_a_table_and_its_html_escape_every_cell() -> None:
    from tacoma.display import html_table, table

    out = io.StringIO()
    table(("NAME", "[bold]X"), [(HOSTILE, "[bold]not markup")], notes=[HOSTILE], file=out)
    assert_clean(out.getvalue())
    assert out.getvalue().count(SHOWN) == 2 and "[bold]not markup" in out.getvalue()
    shown = html_table(("<b>",), [(HOSTILE + "<script>",)], caption=HOSTILE)
    assert_clean(shown)
    assert shown.count(SHOWN) == 2 and "&lt;script&gt;" in shown and "<script>" not in shown


def test_a_progress_shows_what_it_is_told_escaped() -> None:
    from tacoma.display import Progress

    out = io.StringIO()
    with Progress(2, HOSTILE, file=out, show=True) as progress:
        progress.update(completed=1, description=f"trip: hop 1, at {HOSTILE}")
        progress.note(f"meet 3 failed: {HOSTILE}")
    assert_clean(out.getvalue(), progress._repr_html_())
    assert out.getvalue().startswith(f"trip: hop 1, at {SHOWN}\nmeet 3 failed: {SHOWN}\n"
                                     f"{SHOWN}: 1 of 2 done")


# ------------------------------------------------------------------------ lazy results
@pytest.mark.parametrize("agent", LANGUAGES)
def test_a_result_holding_a_lazy_folder_prints_its_reference(place: RunningPlace,
                                                             tmp_path: Path,
                                                             agent: str) -> None:
    code = program(tmp_path, agent, ENDS_LAZY[agent])
    out = tacoma_cli("meet", place.target(agent), "--code", str(code))
    assert out.returncode == 0, out
    assert (f"N (2 elements, lazy)\n  <by reference: 1,001 bytes at {place.address}, "
            "not fetched>\n") in out.stdout, out.stdout
    assert out.stderr == ""
    out = tacoma_cli("meet", place.target(agent), "--code", str(code), "--json")
    assert out.returncode == 0, out
    assert json.loads(out.stdout)["folders"]["N"] == {
        "lazy": {"size": 1001, "count": 2, "origin": place.address}}


def closed_port() -> int:
    """A loopback port where nothing listens (bound, then let go)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_a_forged_reference_is_printed_and_never_fetched(place: RunningPlace,
                                                         tmp_path: Path) -> None:
    """An agent (or a place) can put any reference into a result, naming any origin: one
    where nothing listens, whose fetch would fail, and with text of its own in its name."""
    origin = f"127.0.0.1:{closed_port()}"
    forge = textwrap.dedent(f"""
        from tacoma.wire._lazy import Lazy, Ref
        bc["N"] = Lazy(Ref("N", {origin!r}, "0" * 32, 4096, 3, 65536, b"\\0" * 32))
        bc["M"] = Lazy(Ref("M", {origin + HOSTILE!a}, "0" * 32, 10, 1, 65536, b"\\0" * 32))
    """)
    code = program(tmp_path, "ag_python", forge)
    out = tacoma_cli("meet", place.target("ag_python"), "--code", str(code))
    assert out.returncode == 0, out
    assert_clean(out.stdout, out.stderr)
    assert (f"N (3 elements, lazy)\n  <by reference: 4,096 bytes at {origin}, "
            "not fetched>\n") in out.stdout
    assert f"<by reference: 10 bytes at {origin}{SHOWN}, not fetched>" in out.stdout
    out = tacoma_cli("meet", place.target("ag_python"), "--code", str(code), "--json")
    assert out.returncode == 0, out
    folders = json.loads(out.stdout)["folders"]
    assert folders["N"] == {"lazy": {"size": 4096, "count": 3, "origin": origin}}
    assert folders["M"]["lazy"]["origin"] == origin + HOSTILE
    # And by `tacoma status` of the same meet made async.
    started = tacoma_cli("meet", place.target("ag_python"), "--code", str(code), "--async")
    out = tacoma_cli("status", f"{started.stdout.strip()}@{place.address}", "--wait", "60")
    assert out.returncode == 0, out
    assert_clean(out.stdout, out.stderr)
    assert f"<by reference: 4,096 bytes at {origin}, not fetched>" in out.stdout


# ------------------------------------------------------------------------ the notebook
def forged_briefcase() -> Briefcase:
    """A briefcase as a place could send it: a hostile folder and a lazy folder naming an
    origin where nothing listens (fetching it here would fail: nothing here can)."""
    ref = Ref("DATA", f"127.0.0.1:{closed_port()}" + HOSTILE, "0" * 32, 4096, 3, 65536,
              b"\0" * 32)
    return Briefcase.from_wire({"N" + HOSTILE: [HOSTILE.encode(), b"\x1b[31m"],
                                "DATA": [], LAZY: [ref.pack()]})


def test_the_notebooks_views_of_a_result_are_escaped_and_fetch_nothing() -> None:
    from tacoma.notebook._views import html_view, text_view

    bc = forged_briefcase()
    for shown in (text_view(bc), html_view(bc)):
        assert_clean(shown)
        assert "N" + SHOWN in shown and "lazy" in shown and SHOWN in shown
    assert "DATA=<lazy: 4.1 kB in 3 elements at 127.0.0.1:" in text_view(bc)
    assert bc.is_lazy("DATA")  # still a reference: nothing was fetched


def test_the_notebooks_views_of_an_error_are_escaped() -> None:
    from tacoma.client._status import MeetStatus
    from tacoma.notebook._views import error_lines, html_view, text_view

    error = tacoma.AgentFailed(f"Exception: {HOSTILE}\nAgentFailed: forged line",
                               f"Traceback (most recent call last):\n  {HOSTILE}\n")
    lines = error_lines(error)
    assert_clean(*lines)
    assert lines[0] == f"AgentFailed: Exception: {SHOWN}\\nAgentFailed: forged line"
    # The traceback's lines, split at its newlines only: a "\r" is shown, not obeyed.
    assert lines[-2:] == ["Traceback (most recent call last):", f"  {escape(HOSTILE)}"]
    status = MeetStatus("m" * 16, "127.0.0.1:1", "failed", agent=HOSTILE, error=error,
                        result=forged_briefcase())
    for shown in (text_view(status), html_view(status)):
        assert_clean(shown)
        assert SHOWN in shown


@pytest.fixture(scope="module")
def shell() -> Iterator[Any]:
    from IPython.core.interactiveshell import InteractiveShell

    ipython = InteractiveShell.instance()
    ipython.run_line_magic("load_ext", "tacoma")
    yield ipython
    InteractiveShell.clear_instance()


def test_a_notebook_shows_results_and_a_cells_error_escaped(
        shell: Any, place: RunningPlace, capsys: pytest.CaptureFixture[str]) -> None:
    formats, _ = shell.display_formatter.format(forged_briefcase())
    assert_clean(formats["text/plain"], formats["text/html"])
    assert "N" + SHOWN in formats["text/plain"] and "N" + SHOWN in formats["text/html"]
    shell.user_ns["target"] = place.address
    result = shell.run_cell("%%meet ag_python@{target}\n"
                            f"raise Exception({HOSTILE!a})\n", store_history=True)
    assert isinstance(result.error_in_exec, tacoma.AgentFailed)  # the error, as it was
    assert HOSTILE in str(result.error_in_exec)
    shown = capsys.readouterr()
    assert_clean(shown.out, shown.err)
    assert f"AgentFailed: Exception: {SHOWN}" in shown.out
