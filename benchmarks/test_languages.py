"""Per language: a minimal agent's sync meet, warm and cold, beside the bare interpreter's own
start-up, all measured in the same run.

- warm: the same program of the same principal, so a warm worker of the language, which
  served the meet before (interpreter up, sandbox entered, made clean), takes the meet;
  paced (an untimed pause before each round), and back to back.
- cold: the same meet at a place with `--pool-size 0 --reuse never`: the worker is forked
  from the language's zygote and confined, and (Tcl, Guile) its interpreter started, inside
  the meet.
- bare: the interpreter alone starting and exiting, as a command: `python3 -I -S -c pass`,
  `tclsh` on an empty script, `guile -c '(exit)'`, a trivial C binary.

The languages are the installed interpreters (tacoma doctor's list), and the minimal agent
is each one's own (`Interpreter.programs["minimal"]`): a new language gets its warm and cold
columns here by being installed. The bare start-up is a command per language, known here
for the languages tacoma ships; another language's is skipped.

For C, the untimed first meet compiles the program; the timed ones run the cached binary
(a meet is then: the pooled worker spawns the binary and answers its one call).

Design targets (not asserted: benchmarks report): warm within 3x the kernel's null meet
(test_meet.py's ag_echo), and within 1.5x the warm Python meet; cold within 1.3x the bare
start-up. Every round checks
the agent ran to its end: the sync meet came back with the briefcase it carried.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import tacoma
from tacoma.agent._interpreter import discover_interpreters

from _harness import ServerProcess

WARM_ROUNDS = 15
BACK_TO_BACK_ROUNDS = 100
COLD_ROUNDS = 8
BARE_ROUNDS = 10
POOL_REFILL_PAUSE = 0.3

#: The installed interpreters, by language.
_INSTALLED = {i.language: i for i in discover_interpreters().values()}


def _languages() -> list[Any]:
    params = []
    for language, interpreter in sorted(_INSTALLED.items()):
        problem = interpreter.check()
        if problem is None and "minimal" not in interpreter.programs:
            problem = "it has no minimal program (Interpreter.programs)"
        params.append(pytest.param(language, marks=pytest.mark.skipif(
            problem is not None, reason=f"{interpreter.agent}: {problem}")))
    return params


def _bare_command(language: str, tmp_path: Path) -> list[str]:
    """The interpreter alone, started to run nothing: the cold meet's yardstick."""
    if language == "python":
        return [sys.executable, "-I", "-S", "-c", "pass"]
    if language == "tcl":
        empty = tmp_path / "empty.tcl"
        empty.write_text("")
        tclsh = shutil.which("tclsh")
        if tclsh is None:
            pytest.skip("no tclsh command to time")
        return [tclsh, str(empty)]
    if language == "c":
        source = tmp_path / "trivial.c"
        source.write_text("int main(void) { return 0; }\n")
        subprocess.run(["cc", "-O2", "-o", str(tmp_path / "trivial"), str(source)], check=True)
        return [str(tmp_path / "trivial")]
    if language == "scheme":
        guile = shutil.which("guile")
        if guile is None:
            pytest.skip("no guile command to time")
        return [guile, "-c", "(exit)"]
    if language == "wasm":  # wasmtime has no command here: its Python, running the null module
        return [sys.executable, "-c", "import wasmtime; e = wasmtime.Engine(); "
                "s = wasmtime.Store(e); m = wasmtime.Module(e, '(module (func (export "
                "\"_start\")))'); wasmtime.Instance(s, m, []).exports(s)['_start'](s)"]
    pytest.skip(f"no bare start-up command known for {language}")


def _meet(loop: asyncio.AbstractEventLoop, place: ServerProcess, language: str) -> None:
    interpreter = _INSTALLED[language]
    program = interpreter.programs["minimal"]
    result = loop.run_until_complete(tacoma.ameet(
        f"{interpreter.agent}@{place.address}", {"DATA": [b"1"]}, code=program, timeout=60))
    assert result["DATA"] == [b"1"], result


@pytest.mark.parametrize("language", _languages())
def test_warm_meet(benchmark: Any, loop: asyncio.AbstractEventLoop, place: ServerProcess,
                   language: str) -> None:
    """A minimal agent's meet in a pre-started worker of its language."""
    _meet(loop, place, language)  # untimed: the first meet also opens the connection
    benchmark.extra_info.update(language=language, pool="warm",
                                measures="one sync meet of a minimal agent, warm worker, "
                                         f"after an untimed {POOL_REFILL_PAUSE} s pause")
    benchmark.pedantic(lambda: _meet(loop, place, language),
                       setup=lambda: time.sleep(POOL_REFILL_PAUSE),
                       rounds=WARM_ROUNDS, iterations=1)


@pytest.mark.parametrize("language", _languages())
def test_warm_meet_back_to_back(benchmark: Any, loop: asyncio.AbstractEventLoop,
                                place: ServerProcess, language: str) -> None:
    """The same meet one after another, no pause: a warm worker serves each."""
    _meet(loop, place, language)
    benchmark.extra_info.update(language=language, pool="warm",
                                measures="one sync meet of a minimal agent, warm worker, "
                                         "back to back")
    benchmark.pedantic(lambda: _meet(loop, place, language),
                       rounds=BACK_TO_BACK_ROUNDS, warmup_rounds=5, iterations=1)


@pytest.mark.parametrize("language", _languages())
def test_cold_meet(benchmark: Any, loop: asyncio.AbstractEventLoop,
                   cold_place: ServerProcess, language: str) -> None:
    """The same meet at a place with no pool: the worker starts inside the meet."""
    _meet(loop, cold_place, language)  # untimed: starts the language's zygote
    benchmark.extra_info.update(language=language, pool="none",
                                measures="one sync meet of a minimal agent at --pool-size 0 "
                                         "--reuse never")
    benchmark.pedantic(lambda: _meet(loop, cold_place, language),
                       rounds=COLD_ROUNDS, iterations=1)


@pytest.mark.parametrize("language", _languages())
def test_bare_interpreter_start(benchmark: Any, tmp_path: Path, language: str) -> None:
    """The interpreter alone: start, run nothing, exit (the cold meet's yardstick)."""
    command = _bare_command(language, tmp_path)

    def start() -> None:
        subprocess.run(command, check=True, stdin=subprocess.DEVNULL, timeout=60)

    benchmark.extra_info.update(language=language, command=command,
                                measures="the bare interpreter's start-up and exit")
    benchmark.pedantic(start, rounds=BARE_ROUNDS, iterations=1, warmup_rounds=1)
