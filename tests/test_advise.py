"""examples/search's matcher, and `tacoma advise` (client._advise): its measurements, its two
predictions and its choice, its --run, and the mistakes a user makes with it."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import RunningPlace, SharedPlaces

SEARCH = Path(__file__).parent.parent / "examples" / "search"


def _module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, SEARCH / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


search, corpus = _module("search"), _module("corpus")


def distance(text: bytes, pattern: bytes) -> int:
    """The fewest edits that make `pattern` a substring of `text` (Sellers' algorithm)."""
    previous = list(range(len(pattern) + 1))
    best = previous[-1]
    for c in text:
        current = [0]
        for i in range(1, len(pattern) + 1):
            current.append(min(previous[i] + 1, current[i - 1] + 1,
                               previous[i - 1] + (pattern[i - 1] != c)))
        previous = current
        best = min(best, current[-1])
    return best


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=16).map(lambda b: bytes(97 + x % 3 for x in b)),
       st.binary(min_size=2, max_size=6).map(lambda b: bytes(97 + x % 3 for x in b)),
       st.integers(0, 2))
def test_the_matcher_is_agreps(text: bytes, pattern: bytes, errors: int) -> None:
    errors = min(errors, len(pattern) - 1)
    found = search.approximate(text, pattern, errors)
    assert found == (distance(text, pattern) <= errors)
    if found:  # the filter never drops a match: some piece occurs unchanged
        assert any(piece in text for piece in search.pieces(pattern, errors))


@pytest.fixture(scope="module")
def place(shared_places: SharedPlaces) -> RunningPlace:
    """The worker's shared place (conftest.SharedPlaces), with the corpus in its data
    directory (made again the same, if a module before made it)."""
    running = shared_places[0]
    corpus.make(running.state_dir / "data" / "corpus", 3)
    return running


def advise(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tacoma", "advise", *args],
                          capture_output=True, text=True, timeout=300, check=False)


PATTERN = ["-f", f"PATTERN={corpus.PHRASE}", "-f", "ERRORS=1"]


def test_advice_with_both_predictions_and_why(place: RunningPlace) -> None:
    done = advise(place.target("ag_python"), "--code", str(SEARCH / "search.py"),
                  "--data", "corpus", *PATTERN, "--json")
    assert done.returncode == 0, done.stderr
    advice = json.loads(done.stdout)
    assert 2.9e6 < advice["data_bytes"] < 3.2e6 and advice["directory"] == "corpus"
    assert advice["move_s"] > 0 and advice["fetch_s"] > 0
    assert advice["better"] == ("move" if advice["move_s"] <= advice["fetch_s"] else "fetch")
    assert advice["bandwidth"] > 1e6 and advice["place_per_byte"] > 0
    assert advice["cpus"] >= 1 and advice["agent_cpus"] == 1.0  # from tacoma status
    assert "scans at" in advice["why"]


def test_advise_runs_the_better_way(place: RunningPlace) -> None:
    done = advise(place.target("ag_python"), "--code", str(SEARCH / "search.py"),
                  "--data", "corpus", *PATTERN, "--run")
    assert done.returncode == 0, done.stderr
    assert "move the code to the data:" in done.stdout and "predicted" in done.stdout
    assert "ran: " in done.stdout and "MATCHES" in done.stdout and "better: " in done.stdout
    # Both ways, whichever it chose, find the same lines (the Python API: tacoma.advise).
    import tacoma
    from tacoma.client import _advise

    extra = tacoma.Briefcase(PATTERN=[corpus.PHRASE.encode()], ERRORS=["1"])
    program = (SEARCH / "search.py").read_text()
    advice = tacoma.advise(place.target("ag_python"), program, "corpus", extra=extra)
    assert isinstance(advice, tacoma.Advice) and advice.better in ("move", "fetch")
    moved, _ = advice.run("move")
    fetched, _ = advice.run("fetch")
    assert sorted(moved["MATCHES"]) == sorted(fetched["MATCHES"]) != []
    # In batches of about a file each (the corpus's files are 256 kB, the last smaller):
    # every file is fetched once, whatever fits in each batch.
    batched, _ = _advise.fetch(advice, program, extra, batch=300_000)
    assert batched["FILES"] == moved["FILES"]
    assert sorted(batched["MATCHES"]) == sorted(moved["MATCHES"])


def test_a_size_predicts_for_that_much_data(place: RunningPlace) -> None:
    done = advise(place.target("ag_python"), "--code", str(SEARCH / "search.py"),
                  "--data", "1G", *PATTERN, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["data_bytes"] == 2**30


def test_an_empty_data_directory_says_where_data_goes(place: RunningPlace) -> None:
    (place.state_dir / "data" / "empty").mkdir(exist_ok=True)
    done = advise(place.target("ag_python"), "--code", str(SEARCH / "search.py"),
                  "--data", "empty", *PATTERN)
    assert done.returncode != 0
    assert "holds nothing under 'empty'" in done.stderr
    assert f"Copy the data there (e.g. `cp -r logs {place.state_dir / 'data'}/`" \
        in " ".join(done.stderr.split()), done.stderr


@pytest.mark.parametrize(("args", "status", "says"), [
    (["ag_python", "--code", str(SEARCH / "search.py")], 2, "advise needs AGENT@PLACE"),
    (["ag_c@{}", "--code", str(SEARCH / "search.c")], 2, "Python programs (ag_python) only"),
    (["ag_python@{}", "--code", str(SEARCH / "search.py"), "--data", "nothing-here"], 5,
     "no directory nothing-here"),
    (["ag_python@{}", "--code", str(SEARCH / "nope.py")], 2, "does not exist"),
])
def test_a_mistake_says_what_is_wrong(place: RunningPlace, args: list[str], status: int,
                                      says: str) -> None:
    done = advise(*[a.format(place.address) for a in args], *PATTERN)
    assert done.returncode == status, done.stderr
    assert says in done.stderr
