"""Start three local places, give each a note and a motd, and send the roamer round them.

    python examples/roam/run.py

Each place is a real `tacoma place` process on a free loopback port, with its own state
directory (tacoma.local_places; removed at the end). The roamer starts at the first place,
visits the second and third, and its briefcase comes back to this script at the end of the
trip.
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
            (state / "data" / "motd.txt").write_text(f"welcome to {name}\n")
            (state / "data" / "motd.txt").chmod(0o644)
            subprocess.run([sys.executable, "-P", "-m", "tacoma", "cabinet", "put", "site",  # noqa: S603
                            "-f", f"NOTE=the {name} place", "--replace",
                            "--state-dir", str(state)], check=True, stdout=subprocess.DEVNULL)
        home, *stops = places.addresses
        print(f"places: {', '.join(places.addresses)}")
        started = time.perf_counter()
        result = tacoma.meet(f"ag_python@{home}", {"ITINERARY": stops},
                             code=(HERE / "roam.py").read_text(), timeout=60)
        took = time.perf_counter() - started
        print(f"the roamer came home after {took * 1000:.0f} ms with:")
        for line in result.text("REPORT"):
            print(f"  {line}")
        for line in result.text("SKIPPED") if "SKIPPED" in result else []:
            print(f"  skipped: {line}")


if __name__ == "__main__":
    main()
