"""The mobile-agent benchmark suite (`tacoma bench`) under pytest-benchmark.

Each benchmark of the suite (tacoma/bench/_suite.py: the micro-benchmarks CL, CR, AD,
MSG-1W, MSG-2W, SYNCH, MSG-MA and the micro-kernels ROAM, PROXY, FORW-MSG, FORW-MA of
Dikaiakos, Kyriakou and Samaras) is timed here at one loop size, over a few rounds, at four
real places on loopback started for the module. One round is one run of the loop: the
table's time is a loop's time (for a benchmark timed inside an agent, what that agent
measured is in extra_info too, with its rate). Every round checks that the work was done,
and fails the benchmark otherwise. `tacoma bench` runs the same code over the paper's
loop sizes with sustained runs, and prints the paper's Table 8 beside it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tacoma import local_places
from tacoma.bench import BENCHMARKS, PLACE_FLAGS, Context

#: The loop size each benchmark is timed at (ROAM: hops, whole rounds of its 4 places).
LOOP = {name: 40 if name == "ROAM" else 20 for name in BENCHMARKS}


@pytest.fixture(scope="module")
def context() -> Iterator[Context]:
    with local_places(4, *PLACE_FLAGS) as places:
        yield Context(places.addresses)


@pytest.mark.parametrize("name", list(BENCHMARKS))
def test_suite(benchmark, context: Context, name: str) -> None:
    bench = BENCHMARKS[name](context)
    bench.setup()
    measured = []
    try:
        def one_loop() -> None:
            measured.append(bench.run(LOOP[name]))

        benchmark.pedantic(one_loop, rounds=3, iterations=1, warmup_rounds=1)
    finally:
        bench.teardown()
    best = max(run.rate for run in measured)
    benchmark.extra_info.update({
        "loop_size": LOOP[name], "checked": bench.checked,
        "measured_seconds": [run.seconds for run in measured],
        "best_rate": best,
    })
    assert all(run.ops == LOOP[name] for run in measured)
