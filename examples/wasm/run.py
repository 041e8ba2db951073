"""Start three local places, give each a note, and send a WebAssembly roamer round them.

    python examples/wasm/run.py

Each place is a real `tacoma place` process on a free loopback port, with its own state
directory (tacoma.local_places; removed at the end). roam.c is C source: each place builds
it with clang for wasm32-wasi (once, into its own cache) when the agent arrives, and runs
it under ag_wasm, each meet in a fresh instance. It starts at the first place, visits the
second and third, and its briefcase comes back to this script at the end of the trip.
Then null.wat, a module written by hand, shows that a place takes a module as it is, with
no build.

By hand, against places you started (`tacoma place --listen ...`):

    tacoma meet ag_wasm@A --code examples/wasm/roam.c -f ITINERARY=B -f ITINERARY=C

This needs wasmtime (installed with tacoma) and, for the C source, clang, lld and WASI's
libc at each place; `tacoma doctor` says what a place lacks.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import tacoma

HERE = Path(__file__).parent
NAMES = ["tromso", "ithaca", "oslo"]


def main() -> None:
    with tacoma.local_places(3) as places:
        for name, state in zip(NAMES, places.state_dirs, strict=True):
            subprocess.run([sys.executable, "-P", "-m", "tacoma", "cabinet", "put", "site",  # noqa: S603
                            "-f", f"NOTE=the {name} place", "--replace",
                            "--state-dir", str(state)], check=True, stdout=subprocess.DEVNULL)
        home, *stops = places.addresses
        print(f"places: {', '.join(places.addresses)}")
        started = time.perf_counter()
        result = tacoma.meet(f"ag_wasm@{home}", {"ITINERARY": stops},
                             code=(HERE / "roam.c").read_text(), timeout=120)
        took = time.perf_counter() - started
        print(f"the WebAssembly roamer came home after {took * 1000:.0f} ms "
              f"(builds included) with:")
        for line in result.text("REPORT"):
            print(f"  {line}")
        for line in result.text("SKIPPED") if "SKIPPED" in result else []:
            print(f"  skipped: {line}")

        started = time.perf_counter()
        result = tacoma.meet(f"ag_wasm@{home}", {"NAME": ["world"]},
                             code=(HERE / "null.wat").read_text(), timeout=60)
        took = time.perf_counter() - started
        folders = ", ".join(name for name in result if name != "CODE")
        print(f"the null agent (null.wat, a module as it is) came back after "
              f"{took * 1000:.0f} ms with its folders: {folders}")


if __name__ == "__main__":
    main()
