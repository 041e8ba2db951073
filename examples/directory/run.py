"""A trusted directory at one local place, used by clients and by isolated agents.

    python examples/directory/run.py

Starts a local place, installs directory.py there with --trusted (it runs in the place's
own process), registers two services, and looks one up from the client and one from an
isolated ag_python agent at the same place. Then it times a meet with the directory
against one with ag_echo (answered by the place itself) and one with an isolated agent.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import tacoma

HERE = Path(__file__).parent

#: An isolated agent that asks the trusted directory where a service is.
ASKER = 'bc["WHERE"] = meet("directory", {"OP": ["lookup"], "NAME": bc["NAME"]})["WHERE"]'


def median_us(meet: Callable[[], object], count: int = 200) -> float:
    times = []
    for _ in range(count):
        started = time.perf_counter()
        meet()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def main() -> None:
    with tacoma.local_places(1) as places:
        place, state = places.addresses[0], places.state_dirs[0]
        subprocess.run([sys.executable, "-P", "-m", "tacoma", "install",  # noqa: S603
                        str(HERE / "directory.py"), "--trusted", "--state-dir", str(state)],
                       check=True)
        directory = f"directory@{place}"
        for name, where in (("weather", "10.0.0.7:7707"), ("archive", "10.0.0.9:7707")):
            tacoma.meet(directory, {"OP": ["register"], "NAME": [name], "WHERE": [where]})
        print("registered:", ", ".join(tacoma.meet(directory, {"OP": ["list"]}).text("NAME")))
        found = tacoma.meet(directory, {"OP": ["lookup"], "NAME": ["weather"]})
        print(f"the client looked up weather: {found.text('WHERE')[0]}")
        found = tacoma.meet(f"ag_python@{place}", {"NAME": ["archive"]}, code=ASKER)
        print(f"an isolated agent looked up archive: {found.text('WHERE')[0]}")
        lookup = {"OP": ["lookup"], "NAME": ["weather"]}
        trusted = median_us(lambda: tacoma.meet(directory, lookup))
        echo = median_us(lambda: tacoma.meet(f"ag_echo@{place}", lookup))
        isolated = median_us(lambda: tacoma.meet(f"ag_python@{place}", lookup, code="pass"),
                             count=30)
        print(f"median meet: directory (trusted) {trusted:,.0f} µs, ag_echo {echo:,.0f} µs, "
              f"an isolated ag_python agent {isolated:,.0f} µs")


if __name__ == "__main__":
    main()
