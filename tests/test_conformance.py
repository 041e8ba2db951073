"""The conformance suite: one agent API, the same agents written in every language.

Each case is one behaviour and one agent per language; every interpreter must pass every
case. The languages are the installed interpreters (the tacoma.interpreters entry points):
adding a language means adding its folder under interpreters/ and its column to AGENTS and
PROBES here, not a new test.

The agent API itself is the table in tacoma/agent/_api.py. Each interpreter declares how
its language spells every call (`Interpreter.spellings`) and what it adds of its own
(`Interpreter.extras`); a probe agent in each language reports which of those names its
language really binds, so a call missing or misnamed in one language fails a test that
names the language and the call.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import tacoma
from tacoma import Briefcase
from tacoma.agent._api import CALLS, unbound
from tacoma.agent._interpreter import Interpreter, discover_interpreters

from conftest import RunningPlace, launch_place

#: The installed interpreters, by language.
INTERPRETERS: dict[str, Interpreter] = {
    interpreter.language: interpreter for interpreter in discover_interpreters().values()
}
#: WebAssembly again, on a place that runs its instances in its own process
#: (--instances-in-place): the same suite, as a language of its own here.
IN_PLACE = "wasm-in-place"
if "wasm" in INTERPRETERS:
    INTERPRETERS[IN_PLACE] = INTERPRETERS["wasm"]
LANGUAGE_NAMES = sorted(INTERPRETERS)


@functools.cache
def _problem(language: str) -> str | None:
    """Why `language` cannot run here (as `tacoma doctor` says), or None if it can."""
    interpreter = INTERPRETERS.get(language)
    return "not installed" if interpreter is None else interpreter.check()


def _skip_unless_usable(language: str) -> pytest.MarkDecorator:
    problem = _problem(language)
    return pytest.mark.skipif(problem is not None, reason=f"{language}: {problem}")


#: Every language as a test parameter, skipped (with the reason) where it cannot run.
LANGUAGES = [pytest.param(name, marks=_skip_unless_usable(name)) for name in LANGUAGE_NAMES]

AGENTS: dict[str, dict[str, str]] = {
    # Copy IN to OUT element by element, record the folder names, replace R, remove X.
    "folders": {
        "python": (
            'names = [n.encode() for n in bc.folders()]\n'
            'for e in bc["IN"]:\n'
            '    bc.append("OUT", e)\n'
            'bc.replace("NAMES", names)\n'
            'bc.replace("R", [b"a", b"b"])\n'
            'bc.remove("X")\n'),
        "tcl": (
            'set names {}\n'
            'foreach n [bc_folders] { lappend names [encoding convertto utf-8 $n] }\n'
            'foreach e [bc_folder IN] { bc_append OUT $e }\n'
            'bc_replace NAMES $names\n'
            'bc_replace R [list a b]\n'
            'bc_remove X\n'),
        "scheme": (
            '(define names (map string->utf8 (bc-folders)))\n'
            '(for-each (lambda (e) (bc-append "OUT" e)) (bc-folder "IN"))\n'
            '(bc-replace "NAMES" names)\n'
            '(bc-replace "R" (list "a" "b"))\n'
            '(bc-remove "X")\n'),
        "c": (
            '#include <tacoma.h>\n'
            'int main(void) {\n'
            '    tc_list names, in;\n'
            '    tc_folders(TC_SELF, &names);\n'
            '    tc_folder(TC_SELF, "IN", &in);\n'
            '    for (size_t i = 0; i < in.count; i++)\n'
            '        tc_append(TC_SELF, "OUT", in.items[i].data, in.items[i].len);\n'
            '    tc_replace(TC_SELF, "NAMES", names.items, names.count);\n'
            '    tc_elem r[2] = {{(unsigned char *)"a", 1}, {(unsigned char *)"b", 1}};\n'
            '    tc_replace(TC_SELF, "R", r, 2);\n'
            '    tc_remove(TC_SELF, "X");\n'
            '    return 0;\n'
            '}\n'),
    },
    # Text in, text out: UTF-8 both ways.
    "text": {
        "python": 'for n in bc.text("NAME"):\n    bc.append("GREETING", f"hello, {n}")\n',
        "tcl": 'foreach n [bc_text NAME] { bc_append_text GREETING "hello, $n" }\n',
        "scheme": ('(for-each (lambda (n) (bc-append "GREETING" (string-append "hello, " n)))'
                   ' (bc-text "NAME"))\n'),
        "c": ('#include <tacoma.h>\n'
              'int main(void) {\n'
              '    tc_list n;\n'
              '    if (tc_text(TC_SELF, "NAME", &n) != 0) tc_fail("%s", tc_error());\n'
              '    for (size_t i = 0; i < n.count; i++)\n'
              '        tc_append_textf(TC_SELF, "GREETING", "hello, %s",\n'
              '                        (char *)n.items[i].data);\n'
              '    return 0;\n'
              '}\n'),
    },
    # Meet the null agent, and catch an unknown agent's error.
    "meet": {
        "python": (
            'r = meet("ag_echo", Briefcase(P=[b"ping"]))\n'
            'bc["ECHO"] = r["P"]\n'
            'try:\n'
            '    meet("ag_missing")\n'
            'except __import__("tacoma").UnknownAgent as exc:\n'
            '    bc.append("CAUGHT", str(exc))\n'
            'bc.append("ID", meet("ag_echo", Briefcase(), mode="async"))\n'),
        "tcl": (
            'set r [meet ag_echo [dict create P [list ping]]]\n'
            'bc_replace ECHO [dict get $r P]\n'
            'if {[catch {meet ag_missing} message]} { bc_append_text CAUGHT $message }\n'
            'bc_append_text ID [meet ag_echo {} -async]\n'),
        "scheme": (
            '(define r (meet "ag_echo" (list (cons "P" (list "ping")))))\n'
            '(bc-replace "ECHO" (cdr (assoc "P" r)))\n'
            '(catch \'tacoma (lambda () (meet "ag_missing"))\n'
            '  (lambda (key kind message) (bc-append "CAUGHT" message)))\n'
            '(bc-append "ID" (meet "ag_echo" \'() #:async #t))\n'),
        "c": (
            '#include <tacoma.h>\n'
            'int main(void) {\n'
            '    tc_bc b = tc_new();\n'
            '    tc_append_text(b, "P", "ping");\n'
            '    tc_bc r = tc_meet("ag_echo", b, 0);\n'
            '    tc_list p;\n'
            '    if (r == TC_ERROR || tc_folder(r, "P", &p) != 0) tc_fail("%s", tc_error());\n'
            '    tc_replace(TC_SELF, "ECHO", p.items, p.count);\n'
            '    if (tc_meet("ag_missing", tc_new(), 0) == TC_ERROR)\n'
            '        tc_append_text(TC_SELF, "CAUGHT", tc_error());\n'
            '    char id[128];\n'
            '    if (tc_meet_async("ag_echo", tc_new(), 0, id, sizeof id) != 0)\n'
            '        tc_fail("%s", tc_error());\n'
            '    tc_append_text(TC_SELF, "ID", id);\n'
            '    return 0;\n'
            '}\n'),
    },
    # A private cabinet: write, append, read back, list, remove a folder.
    "cabinet": {
        "python": (
            'c = "conf-python"\n'
            'cabinet_replace(c, "ITEMS", [b"one"], private=True)\n'
            'cabinet_append(c, "ITEMS", bc["IN"][0])\n'
            'bc["READ"] = cabinet_read(c, "ITEMS")\n'
            'bc["FOLDERS"] = cabinet_folders(c)\n'
            'bc["LISTED"] = [x for x in cabinets() if x == c]\n'
            'cabinet_remove(c, "ITEMS")\n'
            'bc["AFTER"] = cabinet_read(c, "ITEMS")\n'),
        "tcl": (
            'set c conf-tcl\n'
            'cabinet_replace $c ITEMS [list one] -private\n'
            'cabinet_append $c ITEMS [lindex [bc_folder IN] 0]\n'
            'bc_replace READ [cabinet_read $c ITEMS]\n'
            'bc_replace FOLDERS [cabinet_folders $c]\n'
            'foreach x [cabinets] { if {$x eq $c} { bc_append LISTED $x } }\n'
            'cabinet_remove $c ITEMS\n'
            'bc_replace AFTER [cabinet_read $c ITEMS]\n'),
        "scheme": (
            '(define c "conf-scheme")\n'
            '(cabinet-replace c "ITEMS" (list "one") #:private #t)\n'
            '(cabinet-append c "ITEMS" (car (bc-folder "IN")))\n'
            '(bc-replace "READ" (cabinet-read c "ITEMS"))\n'
            '(bc-replace "FOLDERS" (cabinet-folders c))\n'
            '(bc-replace "LISTED" (filter (lambda (x) (string=? x c)) (cabinets)))\n'
            '(cabinet-remove c "ITEMS")\n'
            '(bc-replace "AFTER" (cabinet-read c "ITEMS"))\n'),
        "c": (
            '#include <tacoma.h>\n'
            'int main(void) {\n'
            '    const char *c = "conf-c";\n'
            '    tc_list in, got, folders, all, after;\n'
            '    tc_elem one = {(unsigned char *)"one", 3};\n'
            '    if (tc_cabinet_replace(c, "ITEMS", &one, 1, 1) != 0) tc_fail("%s", tc_error());\n'
            '    tc_folder(TC_SELF, "IN", &in);\n'
            '    tc_cabinet_append(c, "ITEMS", in.items[0].data, in.items[0].len, 0);\n'
            '    tc_cabinet_read(c, "ITEMS", &got);\n'
            '    tc_replace(TC_SELF, "READ", got.items, got.count);\n'
            '    tc_cabinet_folders(c, &folders);\n'
            '    tc_replace(TC_SELF, "FOLDERS", folders.items, folders.count);\n'
            '    tc_cabinets(&all);\n'
            '    for (size_t i = 0; i < all.count; i++)\n'
            '        if (strcmp((char *)all.items[i].data, c) == 0)\n'
            '            tc_append_text(TC_SELF, "LISTED", c);\n'
            '    if (tc_cabinet_remove(c, "ITEMS") != 0) tc_fail("%s", tc_error());\n'
            '    tc_cabinet_read(c, "ITEMS", &after);\n'
            '    tc_replace(TC_SELF, "AFTER", after.items, after.count);\n'
            '    return 0;\n'
            '}\n'),
    },
    # Note who launched the meet, then go on along ITINERARY (if any): one entry per place.
    "principal": {
        "python": ('if not isinstance(principal, str):\n'
                   '    fail(f"principal is a {type(principal).__name__}, not a str")\n'
                   'bc.append("PRINCIPAL", principal)\n'
                   'go_next()\n'),
        "tcl": 'bc_append_text PRINCIPAL [principal]\ngo_next\n',
        "scheme": '(bc-append "PRINCIPAL" (principal))\n(go-next)\n',
        "c": ('#include <tacoma.h>\n'
              'int main(void) {\n'
              '    tc_append_text(TC_SELF, "PRINCIPAL", tc_principal());\n'
              '    if (tc_go_next() != 0) tc_fail("go_next: %s", tc_error());\n'
              '    return 0;\n'
              '}\n'),
    },
    "fail": {
        "python": 'fail("no luck today")\n',
        "tcl": 'fail "no luck today"\n',
        "scheme": '(fail "no luck today")\n',
        "c": '#include <tacoma.h>\nint main(void) { tc_fail("no luck today"); }\n',
    },
    "error": {
        "python": 'def inner():\n    raise ValueError("bad thing")\ninner()\n',
        "tcl": 'proc inner {} { error "bad thing" }\ninner\n',
        # Not a tail call, so that inner's frame is in the backtrace.
        "scheme": '(define (inner) (error "bad thing") #t)\n(inner)\n',
        # C has no exceptions: an agent reports its error and aborts (as assert does).
        "c": ('#include <tacoma.h>\n'
              'void inner(void) { fprintf(stderr, "bad thing\\n"); abort(); }\n'
              'int main(void) { inner(); return 0; }\n'),
    },
    "loop": {
        "python": "while True:\n    pass\n",
        "tcl": "while 1 {}\n",
        "scheme": "(let loop () (loop))\n",
        "c": '#include <tacoma.h>\nint main(void) { volatile long x = 0; for (;;) x++; }\n',
    },
    "output": {
        "python": 'import sys\nwhile True:\n    sys.stdout.write("x" * 65536)\n',
        "tcl": "while 1 { puts [string repeat x 65536] }\n",
        "scheme": "(let loop () (display (make-string 65536 #\\x)) (force-output) (loop))\n",
        "c": ('#include <tacoma.h>\n'
              'int main(void) {\n'
              '    static char buf[65536];\n'
              '    memset(buf, 120, sizeof buf);\n'
              '    for (;;)\n'
              '        if (fwrite(buf, 1, sizeof buf, stdout) != sizeof buf || fflush(stdout))\n'
              '            tc_fail("%s", strerror(errno));\n'
              '}\n'),
    },
    "memory": {
        "python": "hog = []\nwhile True:\n    hog.append(bytearray(16 * 1024 * 1024))\n",
        "tcl": "set s [string repeat x 1048576]\nwhile 1 { append s $s }\n",
        "scheme": ("(let loop ((hog '()))\n"
                   "  (loop (cons (make-bytevector (* 16 1024 1024) 1) hog)))\n"),
        "c": ('#include <tacoma.h>\n'
              'int main(void) {\n'
              '    for (;;) {\n'
              '        char *p = malloc(16 << 20);\n'
              '        if (p == NULL) tc_fail("out of memory");\n'
              '        memset(p, 1, 16 << 20);\n'
              '    }\n'
              '}\n'),
    },
}


# WebAssembly agents are written as C ones are, with the same tacoma.h: the same source,
# built by clang for wasm32-wasi, each meet in a fresh instance.
# (Its cabinet is named for its language, as each language's is.)
for _agents in AGENTS.values():
    for _wasm in ("wasm", IN_PLACE):
        _agents.setdefault(_wasm, _agents["c"].replace('"conf-c"', f'"conf-{_wasm}"'))

#: What shows the language's own trace came back: the function the error came from, or
#: (Guile's interpreted code has no procedure names in its frames) Guile's backtrace.
TRACE_MARK = {"python": "inner", "tcl": 'procedure "inner"',
              "scheme": "in the form at <agent> line", "c": "inner at agent.c:2",
              "wasm": "- inner", IN_PLACE: "- inner"}


LIMITS = ("--cpu-seconds", "2", "--memory", str(512 * 2**20), "--file-size", str(2**20))


@pytest.fixture(scope="module")
def worker_place(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningPlace]:
    running = launch_place(tmp_path_factory.mktemp("conformance"), *LIMITS)
    yield running
    assert running.stop() == 0


@pytest.fixture(scope="module")
def in_place_place(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningPlace]:
    running = launch_place(tmp_path_factory.mktemp("conformance-in-place"), *LIMITS,
                           "--instances-in-place")
    yield running
    assert running.stop() == 0


@pytest.fixture
def place(request: pytest.FixtureRequest) -> RunningPlace:
    """The place for the test's language: one with --instances-in-place for IN_PLACE."""
    callspec = getattr(request.node, "callspec", None)
    language = callspec.params.get("language") if callspec is not None else None
    name = "in_place_place" if language == IN_PLACE else "worker_place"
    place: RunningPlace = request.getfixturevalue(name)
    return place


def run(place: RunningPlace, language: str, case: str, **folders: list[bytes]) -> Briefcase:
    if language not in AGENTS[case]:
        pytest.fail(f"no {case} agent is written in {language}: add it to AGENTS")
    return tacoma.meet(place.target(INTERPRETERS[language].agent), Briefcase(folders),
                       code=AGENTS[case][language], timeout=60)


@pytest.mark.parametrize("language", LANGUAGES)
def test_folders_round_trip_any_bytes(place: RunningPlace, language: str) -> None:
    elements = [b"text", bytes(range(256)), b"", b"{unbalanced \\ [brackets $x",
                os.urandom(1024 * 1024)]
    result = run(place, language, "folders", IN=elements, R=[b"old"], X=[b"gone"])
    assert result["OUT"] == elements
    assert result["NAMES"] == [b"IN", b"R", b"X", b"CODE"]
    assert result["R"] == [b"a", b"b"]
    assert "X" not in result


@pytest.mark.parametrize("language", LANGUAGES)
def test_text_is_utf8(place: RunningPlace, language: str) -> None:
    result = run(place, language, "text", NAME=[b"world", "Tromsø".encode()])
    assert result.text("GREETING") == ["hello, world", "hello, Tromsø"]


@pytest.mark.parametrize("language", LANGUAGES)
def test_meets_from_inside_an_agent(place: RunningPlace, language: str) -> None:
    result = run(place, language, "meet")
    assert result["ECHO"] == [b"ping"]
    assert b"ag_missing" in result["CAUGHT"][0]
    assert result["ID"][0]


@pytest.mark.parametrize("language", LANGUAGES)
def test_cabinets(place: RunningPlace, language: str) -> None:
    result = run(place, language, "cabinet", IN=[bytes(range(256))])
    assert result["READ"] == [b"one", bytes(range(256))]
    assert result.text("FOLDERS") == ["ITEMS"]
    assert result.text("LISTED") == [f"conf-{language}"]
    assert result.get("AFTER", []) == []
    # Private: neither a client nor another program finds it (it reads as no cabinet).
    request = {"OP": ["folders"], "CABINET": [f"conf-{language}"]}
    assert tacoma.meet(place.target("ag_cabinet"), request).text("FOLDERS") == []
    snoop = 'bc["F"] = cabinet_folders(bc.text("C")[0])\n'
    assert tacoma.meet(place.target("ag_python"), {"C": [f"conf-{language}"]},
                       code=snoop).get("F", []) == []


def _expected_principal() -> str:
    """The name the test place authenticates this client as: its certificate's."""
    from tacoma.client import current_principal

    name = current_principal()
    assert name  # the session's default identity, made with the first place
    return name


@pytest.mark.parametrize("language", LANGUAGES)
def test_principal_is_who_launched_the_meet(place: RunningPlace, language: str) -> None:
    result = run(place, language, "principal")
    assert result.text("PRINCIPAL") == [_expected_principal()]


@pytest.mark.parametrize("language", LANGUAGES)
def test_a_moving_agents_principal_is_its_trips_launcher(place: RunningPlace,
                                                         language: str) -> None:
    """After a go (here, to the same place), the principal is still the trip's launcher."""
    result = run(place, language, "principal", ITINERARY=[place.address.encode()])
    assert result.text("PRINCIPAL") == [_expected_principal()] * 2


#: Agents whose meet must fail: the case, the error, and what its message must say.
FAILURES = [
    pytest.param("fail", tacoma.AgentFailed, r"^no luck today$",
                 id="fail-ends-the-meet-with-a-message"),
    pytest.param("loop", tacoma.AgentKilled, "CPU time limit of 2 s",
                 id="an-infinite-loop-hits-the-cpu-limit"),
    pytest.param("output", tacoma.AgentFailed, r"(?i)file too large",
                 id="huge-output-hits-the-file-size-limit"),
]


@pytest.mark.parametrize(("case", "error", "message"), FAILURES)
@pytest.mark.parametrize("language", LANGUAGES)
def test_the_meet_fails_as_it_should(place: RunningPlace, language: str, case: str,
                                     error: type[tacoma.MeetError], message: str) -> None:
    with pytest.raises(error, match=message):
        run(place, language, case)


@pytest.mark.parametrize("language", LANGUAGES)
def test_errors_carry_the_languages_own_trace(place: RunningPlace, language: str) -> None:
    with pytest.raises(tacoma.AgentFailed, match="bad thing") as info:
        run(place, language, "error")
    assert TRACE_MARK[language] in info.value.detail


@pytest.mark.parametrize("language", LANGUAGES)
def test_a_memory_bomb_is_contained(place: RunningPlace, language: str) -> None:
    with pytest.raises((tacoma.AgentFailed, tacoma.AgentKilled)):
        run(place, language, "memory")
    assert tacoma.meet(place.target("ag_echo"), {"OK": [b"1"]}) == {"OK": [b"1"]}


def test_every_language_has_every_case() -> None:
    for case, agents in AGENTS.items():
        assert sorted(agents) == sorted(LANGUAGE_NAMES), case


@pytest.mark.parametrize("language", LANGUAGES)
def test_hello_examples(place: RunningPlace, language: str) -> None:
    interpreter = INTERPRETERS[language]
    examples = Path(__file__).parent.parent / "examples" / "hello"
    # hello.c builds for WebAssembly as it is (and says so)
    suffix = ".c" if interpreter.language == "wasm" else interpreter.suffixes[0]
    code = (examples / f"hello{suffix}").read_text()
    result = tacoma.meet(place.target(interpreter.agent), {"NAME": ["world", "Tromsø"]},
                         code=code)
    assert result.text("GREETING") == [f"hello, world from {interpreter.language}",
                                       f"hello, Tromsø from {interpreter.language}"]


#: The languages examples/relay is written in, in the order the agent passes through them.
RELAY = ("python", "tcl", "scheme", "c")


def test_relay_example(place: RunningPlace) -> None:
    """examples/relay: Python meets Tcl meets Scheme meets C; the trail comes back."""
    missing = [language for language in RELAY if _problem(language) is not None]
    if missing:
        pytest.skip(f"the relay needs every language; missing: {', '.join(missing)}")
    relay = Path(__file__).parent.parent / "examples" / "relay"
    result = tacoma.meet(place.target("ag_python"), {
        "TCL": [(relay / "relay.tcl").read_bytes()],
        "SCHEME": [(relay / "relay.scm").read_bytes()],
        "C": [(relay / "relay.c").read_bytes()],
    }, code=(relay / "relay.py").read_text(), timeout=60)
    assert result.text("TRAIL") == [f"{language} at {place.address}" for language in RELAY]


# -- the agent API's table (tacoma/agent/_api.py), bound in every language

@pytest.mark.parametrize("language", LANGUAGE_NAMES)
def test_spellings_cover_exactly_the_table(language: str) -> None:
    missing, extra = unbound(INTERPRETERS[language].spellings)
    assert not missing, f"{language} spells no {', '.join(missing)} (tacoma/agent/_api.py)"
    assert not extra, f"{language} spells {', '.join(extra)}, which are no calls of the API"
    clash = set(INTERPRETERS[language].spellings.values()) & set(INTERPRETERS[language].extras)
    assert not clash, f"{language}: {', '.join(sorted(clash))} both a call and an extra"


def _c_probe(names: list[str]) -> str:
    """A C agent that takes the address of every function in `names`: it compiles only if
    tacoma.h declares them all (and then lists them in FOUND)."""
    table = "".join(f'        {{"{name}", (void (*)(void)){name}}},\n' for name in names)
    return ('#include <tacoma.h>\n'
            'int main(void) {\n'
            '    static const struct { const char *name; void (*address)(void); } bound[] = {\n'
            f'{table}'
            '    };\n'
            '    for (size_t i = 0; i < sizeof bound / sizeof bound[0]; i++)\n'
            '        if (bound[i].address != NULL)\n'
            '            tc_append_text(TC_SELF, "FOUND", bound[i].name);\n'
            '    return 0;\n'
            '}\n')


#: Probe agents: each appends to FOUND the names of folder NAMES its language binds for
#: agents (Python: a global of the program, or a method of bc for "bc.NAME"; Tcl: a proc;
#: Scheme: a definition of the agent's module, not one of Guile's own). C's is a function of
#: the names, since only the compiler can tell which functions tacoma.h declares.
PROBES: dict[str, str | Callable[[list[str]], str]] = {
    "python": (
        'defined = set(globals())\n'
        'for name in bc.text("NAMES"):\n'
        '    if hasattr(bc, name[3:]) if name.startswith("bc.") else name in defined:\n'
        '        bc.append("FOUND", name)\n'),
    "tcl": (
        'foreach name [bc_text NAMES] {\n'
        '    if {[llength [info procs $name]]} { bc_append_text FOUND $name }\n'
        '}\n'),
    "scheme": (
        '(for-each (lambda (name)\n'
        '            (if (module-local-variable %prelude (string->symbol name))\n'
        '                (bc-append "FOUND" name)))\n'
        '          (bc-text "NAMES"))\n'),
    "c": _c_probe,
    "wasm": _c_probe,
    IN_PLACE: _c_probe,
}


def _undeclared(place: RunningPlace, agent: str, source: str) -> set[str]:
    """The names a compiled probe's compiler said are undeclared (none if it compiled)."""
    try:
        tacoma.meet(place.target(agent), code=source, timeout=60)
    except tacoma.AgentFailed as exc:
        undeclared = set(re.findall(r"['\u2018](\w+)['\u2019] undeclared", exc.detail))
        if not undeclared:
            pytest.fail(f"the {agent} probe failed: {exc}\n{exc.detail}")
        return undeclared
    return set()


def _probe(place: RunningPlace, language: str) -> set[str]:
    """Which of its declared spellings and extras `language` really binds, by its probe."""
    interpreter = INTERPRETERS[language]
    names = sorted({*interpreter.spellings.values(), *interpreter.extras})
    probe = PROBES.get(language)
    if probe is None:
        pytest.fail(f"no probe agent is written in {language}: add it to PROBES")
    if not isinstance(probe, str):  # compiled: a name it lacks fails the compile
        undeclared = _undeclared(place, interpreter.agent, probe(names))
        probe = probe([name for name in names if name not in undeclared])
    result = tacoma.meet(place.target(interpreter.agent), {"NAMES": names}, code=probe,
                         timeout=60)
    return set(result.text("FOUND"))


@pytest.fixture(scope="module")
def bound(request: pytest.FixtureRequest) -> Callable[[str], set[str]]:
    """The names each language binds, probed once per language (at its place)."""
    def probe(language: str) -> set[str]:
        name = "in_place_place" if language == IN_PLACE else "worker_place"
        return _probe(request.getfixturevalue(name), language)

    return functools.cache(probe)


@pytest.mark.parametrize(("language", "call"), [
    pytest.param(language, call, marks=_skip_unless_usable(language), id=f"{language}-{call}")
    for language in LANGUAGE_NAMES for call in CALLS
])
def test_every_call_is_bound(bound: Callable[[str], set[str]], language: str,
                             call: str) -> None:
    spelling = INTERPRETERS[language].spellings.get(call)
    assert spelling, f"{language} declares no spelling of the agent API call {call}"
    assert spelling in bound(language), \
        f"{language} does not bind the agent API call {call} as {spelling}"


@pytest.mark.parametrize("language", LANGUAGES)
def test_every_extra_is_bound(bound: Callable[[str], set[str]], language: str) -> None:
    missing = sorted(set(INTERPRETERS[language].extras) - bound(language))
    assert not missing, f"{language} declares extras it does not bind: {', '.join(missing)}"
