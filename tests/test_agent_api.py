"""The agent API's table (tacoma/agent/_api.py) and the check every adapter's worker makes.

The conformance suite (test_conformance.py) probes each language's binding with real agents
at a real place; these tests hold the table itself to its rules, and show that a worker
whose language leaves a call unbound refuses to start (its zygote would not come up), so
the mistake is found where the adapter is written, not when some agent needs the call.
"""

from __future__ import annotations

import dataclasses
import importlib
import subprocess
import sys

import pytest
import tacoma
from tacoma.agent._api import API, CALLS, VALUES, Call, Param, check_bound, unbound
from tacoma.agent._interpreter import Interpreter, discover_interpreters
from tacoma.wire._errors import KINDS

from conftest import RunningPlace

#: The adapters shipped in interpreters/ (a worker module of theirs reads its package's
#: `interpreter`), by language.
SHIPPED: dict[str, Interpreter] = {
    interpreter.language: interpreter for interpreter in discover_interpreters().values()
    if interpreter.worker_module.startswith("tacoma.interpreters.")
}


def _usable(language: str) -> object:
    problem = SHIPPED[language].check()
    return pytest.param(language, marks=pytest.mark.skipif(
        problem is not None, reason=f"{language}: {problem}"))


def test_the_table_is_values_checked_when_built() -> None:
    assert len(CALLS) == len(API)
    for call in API:
        assert call.result in VALUES
        assert all(kind in KINDS for kind in call.errors), call.name
        assert all(param.kind in VALUES for param in call.params), call.name
        assert call.doc and "\n" not in call.doc
    with pytest.raises(ValueError, match="unknown kind"):
        Param("name", "number")
    with pytest.raises(ValueError, match="unknown error kinds"):
        Call("x", "briefcase", (), "nothing", ("no-such-kind",), "x")
    with pytest.raises(ValueError, match="a required parameter follows an optional one"):
        Call("x", "briefcase", (Param("a", "text", optional=True), Param("b", "text")),
             "nothing", (), "x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        API[0].name = "other"  # type: ignore[misc]


def test_check_bound_names_what_is_wrong() -> None:
    spellings = {call.name: call.name for call in API}
    check_bound("toy", spellings, set(spellings.values()))
    del spellings["text"]
    spellings["txet"] = "txet"
    spellings["append"] = "apend"
    assert unbound(spellings) == (["text"], ["txet"])
    with pytest.raises(LookupError) as info:
        check_bound("toy", spellings, {*spellings.values(), "also"} - {"apend"}, ["helper"])
    message = str(info.value)
    assert "the toy adapter" in message
    assert "no spelling for text" in message
    assert "spellings of no call of the API: txet" in message
    assert "declared but not bound: append (apend), helper" in message
    assert "bound but neither a call nor an extra: also" in message


@pytest.mark.parametrize("language", [_usable(name) for name in sorted(SHIPPED)])
def test_each_worker_checks_its_binding_when_it_starts(language: str) -> None:
    importlib.import_module(SHIPPED[language].worker_module)  # raises if it does not bind


@pytest.mark.parametrize("language", [_usable(name) for name in sorted(SHIPPED)])
def test_a_worker_with_a_call_unbound_does_not_start(language: str) -> None:
    interpreter = SHIPPED[language]
    package = interpreter.worker_module.rpartition(".")[0]
    script = (
        "import dataclasses, importlib\n"
        f"package = importlib.import_module({package!r})\n"
        "spellings = {**package.interpreter.spellings, 'text': 'no_such_name'}\n"
        "package.interpreter = dataclasses.replace(package.interpreter, spellings=spellings)\n"
        f"importlib.import_module({interpreter.worker_module!r})\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode != 0
    assert f"LookupError: the {language} adapter does not bind the agent API" in done.stderr
    assert "declared but not bound: text (no_such_name)" in done.stderr


#: tc_text, the call C lacked before the table: the elements of a folder as text, refused
#: (bad-argument) where one is not UTF-8.
C_TEXT = """#include <tacoma.h>
int main(void) {
    tc_list texts;
    if (tc_text(TC_SELF, "IN", &texts) != 0)
        tc_fail("%s: %s", tc_error_kind(), tc_error());
    for (size_t i = 0; i < texts.count; i++)
        tc_append_textf(TC_SELF, "OUT", "%s!", (const char *)texts.items[i].data);
    tc_list_free(&texts);
    return 0;
}
"""


@pytest.mark.skipif("c" not in SHIPPED or SHIPPED["c"].check() is not None,
                    reason="needs ag_c and a C compiler")
def test_c_reads_a_folder_as_text(shared_place: RunningPlace) -> None:
    place = shared_place
    result = tacoma.meet(place.target("ag_c"), {"IN": ["Tromsø", ""]}, code=C_TEXT, timeout=60)
    assert result.text("OUT") == ["Tromsø!", "!"]
    with pytest.raises(tacoma.AgentFailed, match=r"^bad-argument: .*utf-8"):
        tacoma.meet(place.target("ag_c"), {"IN": [b"\xff"]}, code=C_TEXT, timeout=60)
