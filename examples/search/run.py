"""Move the code to the data, or the data to the code? One search, both ways.

    python examples/search/run.py [--mb 10]

Starts a local place, puts a corpus of text files (corpus.py) in its data directory, and
searches it for "mobile agents meet the data" with one error: by sending search.py (and
search.c) to the place, and by fetching the files through fileserver.py and scanning them
here (fetch.py). Prints each way's time and checks that they found the same lines.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import tacoma

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from corpus import PHRASE, make  # noqa: E402
from fetch import fetch_and_scan  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=10.0, help="megabytes of text (10)")
    args = parser.parse_args()
    pattern = PHRASE.encode()
    with tacoma.local_places(1) as places:
        address, data = places.addresses[0], places.state_dirs[0] / "data"
        planted = make(data, args.mb)
        print(f"{args.mb:g} MB of text at {address}, {planted} lines planted")
        results = {}
        for language, program in (("ag_python", "search.py"), ("ag_c", "search.c")):
            started = time.perf_counter()
            bc = tacoma.meet(f"{language}@{address}", {"PATTERN": [pattern], "ERRORS": ["1"]},
                             code=(HERE / program).read_text(), timeout=600)
            seconds = time.perf_counter() - started
            results[language] = sorted(bc["MATCHES"])
            print(f"code to the data, {language}: {len(bc['MATCHES'])} lines in "
                  f"{seconds:.2f} s (agent CPU {float(bc.text('CPU')[0]):.2f} s)")
        started = time.perf_counter()
        found, fetched = fetch_and_scan(address, pattern, errors=1)
        seconds = time.perf_counter() - started
        print(f"data to the code: {len(found)} lines in {seconds:.2f} s "
              f"({fetched / 1e6:.1f} MB fetched)")
        assert results["ag_python"] == results["ag_c"] == sorted(found), "the ways disagree"
        assert len(found) == planted, (len(found), planted)
        print("both ways found the same lines")


if __name__ == "__main__":
    main()
