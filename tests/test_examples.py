"""The multi-place examples, run as a user would: `python examples/NAME/run.py`."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import wasm_c_problem

EXAMPLES = Path(__file__).parent.parent / "examples"
WASM_PROBLEM = wasm_c_problem()


def _run(name: str) -> str:
    done = subprocess.run([sys.executable, str(EXAMPLES / name / "run.py")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_roam_visits_three_places_and_comes_home_with_what_it_read() -> None:
    out = _run("roam")
    addresses = re.search(r"places: (\S+), (\S+), (\S+)", out)
    assert addresses is not None, out
    reports = [line.strip() for line in out.splitlines() if "note:" in line]
    assert len(reports) == 3
    for report, address, name in zip(reports, addresses.groups(), ["tromso", "ithaca", "oslo"],
                                     strict=True):
        assert report.startswith(address)
        assert f"note: the {name} place" in report  # from the place's cabinet
        assert f"motd: welcome to {name}" in report  # from its data directory
        assert re.search(r"load: \d+\.\d\d$", report)  # from the host


@pytest.mark.skipif(WASM_PROBLEM is not None, reason=f"ag_wasm: {WASM_PROBLEM}")
def test_wasm_roamer_visits_three_places_in_order_and_comes_home() -> None:
    """examples/wasm: roam.c, built for wasm32-wasi by each place, reports every place of
    its trip in order, with the note from that place's cabinet; then null.wat, a module as
    it is, comes back with its briefcase untouched."""
    out = _run("wasm")
    addresses = re.search(r"places: (\S+), (\S+), (\S+)", out)
    assert addresses is not None, out
    reports = [line.strip() for line in out.splitlines() if "note:" in line]
    assert reports == [f"{hop}. {address}  note: the {name} place  (wasm)"
                       for hop, address, name in zip((1, 2, 3), addresses.groups(),
                                                     ["tromso", "ithaca", "oslo"],
                                                     strict=True)], out
    assert "skipped:" not in out
    assert "came back after" in out and out.rstrip().endswith("with its folders: NAME")


def test_proxy_serves_clients_in_three_languages_from_servers_in_three() -> None:
    out = _run("proxy")
    answers = [line for line in out.splitlines() if " -> " in line]
    assert len(answers) == 12
    for client in ("ag_python: ", "ag_tcl: ", "ag_c: ", "ag_python (forwarding): "):
        assert sum(line.startswith(client) for line in answers) == 3
    for server in ("upper (tcl)", "reverse (scheme)", "count (c)"):
        assert sum(server in line for line in answers) == 4  # round robin
    assert "'tromsø' -> 'TROMSØ'" in out or "'tromsø' -> 'øsmort'" in out \
        or "'tromsø' -> '7 bytes'" in out
    assert "the proxy served 9 requests, forwarded 3" in out


def test_directory_is_a_trusted_agent_clients_and_isolated_agents_use() -> None:
    out = _run("directory")
    assert "registered: archive, weather" in out
    assert "the client looked up weather: 10.0.0.7:7707" in out
    assert "an isolated agent looked up archive: 10.0.0.9:7707" in out
    assert re.search(r"median meet: directory \(trusted\) [\d,]+ µs", out)


def test_search_finds_the_same_lines_both_ways() -> None:
    """examples/search: search.py and search.c sent to the data, and the files fetched and
    searched here, find the same planted lines."""
    done = subprocess.run([sys.executable, str(EXAMPLES / "search" / "run.py"), "--mb", "3"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "both ways found the same lines" in done.stdout
    assert re.search(r"code to the data, ag_c: \d+ lines", done.stdout)
    assert re.search(r"data to the code: \d+ lines in .* \(3\.\d MB fetched\)", done.stdout)
