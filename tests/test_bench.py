"""`tacoma bench`: the suite runs, checks its work, and reports beside the paper's figures."""

from __future__ import annotations

import io
import json
import math
import subprocess
import sys

import pytest
import tacoma
from tacoma.bench import PLACE_FLAGS, Plan, dumps, plan, run, run_info, table
from tacoma.bench._paper import TABLE_8
from tacoma.bench._suite import Measured, Run

from conftest import place_fixture

#: The module's own place, not the worker's shared one: on a place that has served other
#: tests' meets, a traced meet's steps (the client's send, the place's examine) overlap
#: enough that their sum passes the meet's total by more than the 5 % allowed below.
place = place_fixture()

def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tacoma", "bench", *args],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_quick_run_of_some_benchmarks(tmp_path) -> None:
    out_file = tmp_path / "bench.json"
    done = _bench("SYNCH", "roam", "FORW-MSG", "--quick", "--json", str(out_file),
                  "--details", "--plot", str(tmp_path / "plots"))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split()[:4] == ["benchmark", "unit", "tacoma", "peak"]
    synch = next(line for line in lines if line.startswith("SYNCH "))
    assert synch.split()[-6:] == ["16.03", "14.00", "96.15", "92.00", "526", "413"]
    assert "about" in done.stderr and "[3/3] FORW-MSG" in done.stderr  # progress
    written = json.loads(out_file.read_text())
    assert written["run"]["mode"] == "quick" and written["run"]["cpus"] > 0
    assert written["run"]["isolation"] == "default" and written["run"]["language"] == "python"
    measured = {b["name"]: b for b in written["benchmarks"]}
    assert set(measured) == {"SYNCH", "ROAM", "FORW-MSG"}
    for result in measured.values():
        assert [r["loop_size"] for r in result["runs"]] in ([1, 3, 10, 30], [4, 12, 40])
        assert all(r["ops"] == r["loop_size"] and r["total_s"] > 0 for r in result["runs"])
        assert result["sustained"]["ops"] >= result["runs"][-1]["ops"]
        assert 0 < result["sustained_rate"] <= result["peak_rate"] < math.inf
        assert result["checked"]
    assert measured["FORW-MSG"]["parameters"]["clients"] == 3
    assert "ROAM (hops/s; checked:" in done.stdout  # --details
    for name in ("synch", "roam", "forw-msg"):  # --plot
        assert (tmp_path / "plots" / f"{name}.png").read_bytes().startswith(b"\x89PNG")


def test_each_command_of_bench_has_its_own_help() -> None:
    """`tacoma bench` is the suite and a group: `tacoma bench COMMAND --help` is that
    command's help (its usage, its options), never the suite's; the suite's lists them."""
    parent = _bench("--help")
    assert parent.returncode == 0, parent.stderr
    assert parent.stdout.startswith("Usage: tacoma bench [OPTIONS] [NAME]...")
    commands = parent.stdout.split("Commands:")[1]
    for name in ("overhead", "breakdown", "lazy", "movecode", "spalink"):
        assert name in commands
        own = _bench(name, "--help")
        assert own.returncode == 0, own.stderr
        assert own.stdout != parent.stdout
        assert own.stdout.startswith(f"Usage: tacoma bench {name} [OPTIONS]\n"), own.stdout
        assert "--quick" in own.stdout and "--language" not in own.stdout
    assert "--place HOST:PORT" in _bench("breakdown", "--help").stdout
    assert "--plot" in _bench("overhead", "--help").stdout
    # A suite option given to a command is refused there, with that command's usage.
    wrong = _bench("overhead", "--language", "tcl")
    assert wrong.returncode == 2 and "tacoma bench overhead --help" in wrong.stderr


def test_unknown_benchmarks_and_places_are_refused() -> None:
    unknown = _bench("NOPE", "--quick")
    assert unknown.returncode == 2 and "no benchmark NOPE" in unknown.stderr
    few = _bench("--places", "127.0.0.1:1,127.0.0.1:2")
    assert few.returncode == 2 and "four places" in few.stderr
    down = _bench("SYNCH", "--quick", "--places", ",".join(["127.0.0.1:1"] * 4))
    assert down.returncode == 1
    assert "FAILED" in down.stdout and "SYNCH failed: " in down.stdout  # no rate, a reason


def test_the_table_keeps_the_papers_figures_in_their_own_columns() -> None:
    ours = Measured("PROXY", "requests/s", [Run(10, 10, 0.5)], Run(100, 100, 4.0), "x",
                    peak_from=2)
    roam = Measured("ROAM", "hops/s", [Run(4, 4, 1.0)], Run(40, 40, 2.0), "x")
    out = io.StringIO()
    table([ours, roam], file=out)
    text = out.getvalue().splitlines()
    assert text[0].split()[:4] == ["benchmark", "unit", "tacoma", "peak"]
    proxy = text[1].split()
    assert proxy[:4] == ["PROXY", "requests/s", "25.00", "25.00"]
    assert proxy[4:] == ["-"] * 6  # the paper has no PROXY rates
    assert text[2].split()[2:] == ["20.00", "20.00", "23.92", "0.68", "44.64", "44.64",
                                   "14.70", "14.70"]
    notes = " ".join(text[3:])  # under the table: whose figures are whose, and why
    assert "Concordia, Aglets and Voyager columns are quoted from the paper" in notes
    assert "where the sustained run was the fastest the two are equal" in notes
    assert TABLE_8["CL"]["Concordia"] == (3125, 3000)
    assert TABLE_8["FORW-MSG-12"]["Voyager"] == (48.25, 48.25)  # Table 8's row: 12 clients


def test_the_full_plan_says_what_it_will_run() -> None:
    full = Plan([], quick=False)
    assert full.names[0] == "CL" and len(full.names) == 13
    assert full.sizes("CL") == [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000]
    assert full.sizes("ROAM") == [4, 40, 400, 4000]
    assert full.estimate("ROAM") > full.estimate("SYNCH")
    quick = Plan([], quick=True)  # at least three points of every curve, and the sustained
    assert all(len(quick.sizes(name)) >= 3 for name in quick.names)
    assert all(n % 4 == 0 for n in quick.sizes("ROAM"))  # whole rounds of its four places


@pytest.mark.slow
def test_the_sustained_run_keeps_to_a_small_share_of_the_place() -> None:
    """AD's sustained run against places whose share is 2 meets per principal (--max-meets
    8), each agent a fresh process (slow to end): it keeps within the places' admission
    (at most Context.in_flight dispatched, the rest queued there, none refused), ends when
    its agents have, and the next benchmark finds the place free for its resident."""
    with tacoma.local_places(4, "--max-meets", "8", "--pool-size", "0", "--reuse",
                             "never") as places:
        results = run(plan(["AD", "MSG-1W"], quick=True), places.addresses)
        assert [(r.name, r.failure) for r in results] == [("AD", ""), ("MSG-1W", "")]
        ad = results[0]
        assert ad.sustained is not None and ad.sustained.ops >= ad.runs[-1].ops
        assert ad.parameters["in_flight"] == 16
        for address in places.addresses:  # nothing of the run's left behind
            left = tacoma.place_status(address)
            assert (left.running, left.queued) == (0, 0), address


@pytest.mark.slow
def test_a_failed_benchmark_is_reported_and_the_next_one_runs(tmp_path) -> None:
    """ROAM's fourth place is down (no place listens at its address): ROAM fails, and says
    why in the table, the JSON and its plot; SYNCH, after it, uses only A and B and runs."""
    pytest.importorskip("matplotlib")
    from tacoma.bench._plot import plot_suite, suite_figure

    with tacoma.local_places(3, *PLACE_FLAGS) as places:
        addresses = [*places.addresses, "127.0.0.1:1"]
        the_plan = plan(["ROAM", "SYNCH"], quick=True)
        info = run_info(the_plan, addresses)
        roam, synch = run(the_plan, addresses)
    assert "127.0.0.1:1" in roam.failure and math.isnan(roam.peak_rate)
    assert not synch.failure and synch.sustained_rate > 0
    out = io.StringIO()
    table([roam, synch], file=out)
    rows = {line.split()[0]: line.split() for line in out.getvalue().splitlines()[1:3]}
    assert rows["ROAM"][2:4] == ["FAILED", "FAILED"]
    assert rows["SYNCH"][2] != "FAILED"
    note = next(line for line in out.getvalue().splitlines() if line.startswith("ROAM failed"))
    assert "127.0.0.1:1" in note and len(note) <= len("ROAM failed: ") + 120
    written = json.loads(dumps([roam, synch], info))
    assert written["run"]["isolation"] == "given places"
    assert [(b["name"], bool(b["failure"]), b["peak_rate"] is None)
            for b in written["benchmarks"]] == [("ROAM", True, True), ("SYNCH", False, False)]
    paths = plot_suite([roam, synch], tmp_path, info)
    assert [p.name for p in paths] == ["roam.png", "synch.png"]
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in paths)
    figure = suite_figure(roam, info)
    texts = [t.get_text() for t in figure.texts]
    assert any(t.startswith("failed: ") and "127.0.0.1:1" in t for t in texts)
    assert "FAILED" in figure.get_suptitle()


@pytest.mark.slow
def test_overhead_per_size_and_isolation_setting(tmp_path) -> None:
    out_file = tmp_path / "overhead.json"
    done = _bench("overhead", "--quick", "--json", str(out_file), "--plot", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].split()[:2] == ["setting", "bytes"]
    rows = json.loads(out_file.read_text())["overhead"]
    settings = {row["setting"] for row in rows}
    assert len(settings) >= 2 and any("no pool" in s for s in settings)
    assert {row["size"] for row in rows} == {128, 1500}
    for row in rows:
        assert row["passive_us"] > 0 and row["echo_us"] > 0 and row["agent_us"] > 0
        assert row["agent_overhead"] == (row["agent_us"] - row["passive_us"]) / \
            row["passive_us"]
        assert row["trusted_us"] > 0  # the trusted null agent, installed for the run
        assert row["trusted_overhead"] == (row["trusted_us"] - row["passive_us"]) / \
            row["passive_us"]
        if row["instance_us"] is not None:  # a language of fresh instances runs here
            assert row["instance_us"] > 0
            assert row["instance_overhead"] == (row["instance_us"] - row["passive_us"]) / \
                row["passive_us"]
    assert (tmp_path / "overhead.png").read_bytes().startswith(b"\x89PNG")


def test_a_traced_meet_times_each_step_on_every_side(place) -> None:
    import tacoma

    timed = tacoma.trace(place.target("ag_python"), {"DATA": [b"x"]},
                         code='bc["SAW_TRACE"] = [str("TRACE" in bc)]')
    assert timed.briefcase["SAW_TRACE"] == [b"False"]  # the agent never sees it
    assert "TRACE" not in timed.briefcase
    steps = [(side, step) for side, step, _ in timed.steps]
    assert steps == [("client", "marshal"), ("client", "connect or reuse"),
                     ("client", "send"), ("place", "examine"), ("place", "find agent"),
                     ("place", "take worker"), ("place", "hand to worker"),
                     ("worker", "receive and unmarshal"), ("worker", "start"),
                     ("worker", "run"), ("worker", "return"), ("client", "transfer")]
    assert all(seconds >= 0 for _, _, seconds in timed.steps)
    # The steps add up to the total, except where a reader starts before its writer's
    # write returns: the client's send and the place's hand-off to the worker each may
    # overlap the next side's steps (by as long as the write took: seconds on a loaded
    # machine), and are counted whole.
    took = dict(((side, step), s) for side, step, s in timed.steps)
    overlap = took[("client", "send")] + took[("place", "hand to worker")]
    assert sum(s for _, _, s in timed.steps) <= timed.total + overlap + 1e-6
    echo = tacoma.trace(place.target("ag_echo"), {"X": [b"1"]})
    assert echo.briefcase == {"X": [b"1"]}
    assert {side for side, _, _ in echo.steps} == {"client", "place"}
    out = subprocess.run([sys.executable, "-m", "tacoma", "meet", place.target("ag_echo"),
                          "-f", "X=1", "--trace", "--json"], capture_output=True, text=True,
                         check=True)
    parsed = json.loads(out.stdout)
    assert parsed["folders"] == {"X": ["1"]} and parsed["total"] > 0
    assert ("place", "find agent") in {(s["side"], s["step"]) for s in parsed["trace"]}


def test_breakdown_beside_tacomas_table_1(tmp_path) -> None:
    out_file = tmp_path / "breakdown.json"
    done = _bench("breakdown", "--quick", "--json", str(out_file), "--plot", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "21,675" in done.stdout and "10a agent start" in done.stdout
    medians = json.loads(out_file.read_text())
    assert medians["total_median_us"] > 0
    assert {"worker", "place", "client"} == {row["side"] for row in medians["breakdown"]}
    assert (tmp_path / "breakdown.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.slow
def test_the_parameters_language_sizes_and_isolation(tmp_path) -> None:
    out_file = tmp_path / "bench.json"
    done = _bench("CL", "MSG-MA", "SYNCH", "--quick", "--language", "tcl", "--agent-size",
                  "4096", "--message-size", "512", "--isolation", "same-uid", "--json",
                  str(out_file))
    assert done.returncode == 0, done.stdout + done.stderr
    for result in json.loads(out_file.read_text())["benchmarks"]:
        assert result["failure"] is None
        assert result["parameters"]["language"] == "tcl"
        assert result["parameters"]["agent_bytes"] == 4096
        assert result["parameters"]["message_bytes"] == 512
        assert result["parameters"]["isolation"] == "same-uid"


@pytest.mark.parametrize("tls", [False, True], ids=["plaintext", "mutual-tls"])
def test_the_passive_server_is_the_installed_tacoma_whatever_the_directory(
        tmp_path, monkeypatch, tls: bool) -> None:
    """A folder named tacoma in the current directory (a checkout, a user's own) must not
    stand in for the installed package in the passive echo server's process; and the
    server echoes, in plaintext or over mutual TLS as a place speaks it."""
    import asyncio

    from tacoma.bench._overhead import _start_passive
    from tacoma.bench._passive import PassiveClient
    from tacoma.client._identity import credentials

    (tmp_path / "tacoma").mkdir()
    (tmp_path / "tacoma" / "__init__.py").write_text("raise SystemExit('the wrong tacoma')\n")
    monkeypatch.chdir(tmp_path)
    proc, address = _start_passive(tls)
    try:
        assert address.startswith("127.0.0.1:")

        async def echo() -> object:
            client = await PassiveClient.connect(
                address, credentials().context(address) if tls else None)
            try:
                return await client.request({"DATA": [b"x"]})
            finally:
                client.close()

        assert asyncio.run(echo()) == {"DATA": [b"x"]}
    finally:
        proc.terminate()
        proc.wait(30)


def test_lazy_beside_accents_figures(tmp_path) -> None:
    """Accent's experiment, quick: eager and lazy meets of 1 and 10 MB, each share read in
    order and at random, with prefetch 0, 1 and 3; what was moved is what was served."""
    out_file = tmp_path / "lazy.json"
    done = _bench("lazy", "--quick", "--json", str(out_file))
    assert done.returncode == 0, done.stderr
    assert "Table 4-5" in done.stdout and "bytes moved (Accent's Figure 4-3)" in done.stdout
    assert "lazy PF3" in done.stdout and "First reference of each file" in done.stdout
    rows = json.loads(out_file.read_text())["lazy"]
    assert len(rows) == 2 * 4 * 2 * 4  # sizes, shares, patterns, eager and 3 prefetches
    for row in rows:
        reads = max(1, math.ceil(row["size"] * row["fraction"] / 65536))
        last = row["size"] - (row["size"] // 65536) * 65536  # the short last chunk
        # The agent read its share (at random, perhaps the short last chunk among it).
        assert row["touched"] in (min(reads * 65536, row["size"]),
                                  (reads - 1) * 65536 + last)
        assert 0 < row["transfer_ms"] < row["total_ms"]
        if row["strategy"] == "eager":
            assert row["moved"] == row["size"]
        elif row["fraction"] < 0.1:  # the chunks read, their prefetch, and the manifest
            assert row["moved"] <= (reads + reads * row["prefetch"] + 1) * 65536 + 8192
        else:
            assert row["moved"] >= row["touched"]


def test_movecode_both_ways_beside_the_advice() -> None:
    """A small grid: 1 MB, with and without background clients, at two CPU shares (as
    root; one share otherwise): both ways find the planted lines, the advice is recorded
    and counted, and the background's latency is measured while it runs."""
    import io
    import os

    from tacoma.bench._movecode import measure_movecode, movecode_table

    rows = measure_movecode(True, sizes_mb=[1.0], cpus=[1.0, 0.2], clients=[0, 1])
    assert len(rows) == (4 if os.geteuid() == 0 else 2)
    for row in rows:
        assert row.matches > 0 and row.move_s > 0 and row.fetch_s > 0
        assert row.predicted in ("move", "fetch") and row.faster in ("move", "fetch")
        assert (row.background_move_ms is None) == (row.clients == 0)
    out = io.StringIO()
    movecode_table(rows, file=out)
    right = sum(r.predicted == r.faster for r in rows)
    assert f"it picked the faster way in {right} of {len(rows)} settings" in out.getvalue()


@pytest.mark.slow
def test_spalink_shapes(tmp_path) -> None:
    """The simulator reproduces the shapes the paper reports: a cache helps the background's
    hits and not agrep's (one sequential pass); a slow server starves agrep there, a fast
    one helps it a little."""
    from tacoma.bench._spalink import simulate

    small, large = simulate("client", cache_mb=4), simulate("client", cache_mb=64)
    assert large.background_hits > small.background_hits + 0.1
    assert small.agrep_hits < 0.05 and large.agrep_hits < 0.05
    # agrep gains only from the disk the background's hits leave it, less than they do.
    assert large.agrep_s / small.agrep_s > large.background_latency_ms / \
        small.background_latency_ms
    slow_client, slow_server = simulate("client", speed=0.25), simulate("server", speed=0.25)
    assert slow_server.agrep_s > 1.5 * slow_client.agrep_s
    fast_client, fast_server = simulate("client", speed=2), simulate("server", speed=2)
    assert fast_server.agrep_s < fast_client.agrep_s
    out_file = tmp_path / "spalink.json"
    done = _bench("spalink", "--quick", "--json", str(out_file))
    assert done.returncode == 0, done.stderr
    assert "Figures 6-7" in done.stdout and "synthetic" in done.stdout
    assert {o["where"] for o in json.loads(out_file.read_text())["spalink"]} == {"client",
                                                                               "server"}
