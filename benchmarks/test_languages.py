"""Per language: a minimal agent's sync meet, warm (pooled) and cold (no pool), beside the bare
interpreter's own start-up, all measured in the same run.

- warm: a pre-started worker of the language (interpreter up, sandbox entered) takes the
  meet; an untimed pause before each round lets the pool replace the used worker.
- cold: the same meet at a place with `--pool-size 0`: the worker is forked from the
  language's zygote and confined, and (Tcl, Guile) its interpreter started, inside the meet.
- bare: the interpreter alone starting and exiting, as a command: `python3 -I -S -c pass`,
  `tclsh` on an empty script, `guile -c '(exit)'`, a trivial C binary.

For C, the untimed first meet compiles the program; the timed ones run the cached binary
(a meet is then: the pooled worker spawns the binary and answers its one call).

Issue 3's design targets (not asserted: benchmarks report): warm within 3x the kernel's
null meet (test_meet.py's ag_echo), cold within 1.3x the bare start-up. Every round checks
the agent really ran (the briefcase came back with its mark).
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

#: A minimal agent per language: it marks the briefcase, so a round can check it ran.
MINIMAL = {
    "python": 'bc["RAN"] = [b"1"]\n',
    "tcl": "bc_append RAN 1\n",
    "scheme": '(bc-append "RAN" "1")\n',
    "c": '#include <tacoma.h>\nint main(void) { return tc_append_text(TC_SELF, "RAN", "1"); }\n',
}
WARM_ROUNDS = 15
COLD_ROUNDS = 8
BARE_ROUNDS = 10
POOL_REFILL_PAUSE = 0.3

_INSTALLED = discover_interpreters()


def _languages() -> list[Any]:
    params = []
    for language in MINIMAL:
        interpreter = _INSTALLED.get(f"ag_{language}")
        problem = interpreter.check() if interpreter is not None else "not installed"
        params.append(pytest.param(language, marks=pytest.mark.skipif(
            problem is not None, reason=f"ag_{language}: {problem}")))
    return params


def _bare_command(language: str, tmp_path: Path) -> list[str]:
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
    guile = shutil.which("guile")
    if guile is None:
        pytest.skip("no guile command to time")
    return [guile, "-c", "(exit)"]


def _meet(loop: asyncio.AbstractEventLoop, place: ServerProcess, language: str) -> None:
    result = loop.run_until_complete(tacoma.ameet(
        f"ag_{language}@{place.address}", {}, code=MINIMAL[language], timeout=60))
    assert result["RAN"] == [b"1"], result


@pytest.mark.parametrize("language", _languages())
def test_warm_meet(benchmark: Any, loop: asyncio.AbstractEventLoop, place: ServerProcess,
                   language: str) -> None:
    """A minimal agent's meet in a pre-started worker of its language."""
    _meet(loop, place, language)  # untimed: the first meet also opens the connection
    benchmark.extra_info.update(language=language, pool="warm",
                                measures="one sync meet of a minimal agent, pooled worker, "
                                         f"after an untimed {POOL_REFILL_PAUSE} s pause")
    benchmark.pedantic(lambda: _meet(loop, place, language),
                       setup=lambda: time.sleep(POOL_REFILL_PAUSE),
                       rounds=WARM_ROUNDS, iterations=1)


@pytest.mark.parametrize("language", _languages())
def test_cold_meet(benchmark: Any, loop: asyncio.AbstractEventLoop,
                   cold_place: ServerProcess, language: str) -> None:
    """The same meet at a place with no pool: the worker starts inside the meet."""
    _meet(loop, cold_place, language)  # untimed: starts the language's zygote
    benchmark.extra_info.update(language=language, pool="none",
                                measures="one sync meet of a minimal agent at --pool-size 0")
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
