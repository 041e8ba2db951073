"""Make a corpus of text files to search: `python examples/search/corpus.py DIR --mb 30`.

Lines of words drawn from a fixed vocabulary (the same seed gives the same corpus), in
files of about 256 kB under subdirectories of DIR, as a source tree would be (agrep's
trace in Spalink et al. searched 23 MB in 1,400 files). Every 5,000th line holds the
phrase "mobile agents meet the data", now and then misspelt by one letter: a search for
it with one error finds them all, an exact one only some.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

WORDS = (
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "with", "was", "on", "be",
    "by", "this", "are", "or", "from", "at", "an", "which", "but", "not", "have", "has", "had",
    "were", "all", "their", "there", "can", "been", "one", "more", "will", "would", "place",
    "agent", "briefcase", "folder", "cabinet", "meet", "network", "kernel", "process",
    "memory", "server", "client", "file", "cache", "disk", "block", "request", "time", "data",
    "code", "move", "fetch", "read", "write", "scan", "search", "pattern", "error", "line",
    "text", "system", "machine", "host", "trust", "thread", "socket", "frame", "buffer",
    "queue", "worker", "zygote", "sandbox", "limit", "quota", "share", "load", "speed",
    "latency",
)
PHRASE = "mobile agents meet the data"
FILE_BYTES = 256 * 1024


def misspelt(rng: random.Random, phrase: str) -> str:
    at = rng.randrange(len(phrase))
    return phrase[:at] + rng.choice("xyzq") + phrase[at + 1:]


def make(root: Path, megabytes: float, seed: int = 1) -> int:
    """Write the corpus under `root`; the number of lines that hold the phrase (exactly or
    with one letter changed)."""
    rng = random.Random(seed)  # noqa: S311 - a reproducible corpus, not a secret
    total, planted, number, index = int(megabytes * 1_000_000), 0, 0, 0
    written = 0
    while written < total:
        path = root / f"d{index // 50:03d}" / f"f{index:05d}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        lines, size = [], 0
        while size < min(FILE_BYTES, total - written):
            number += 1
            if number % 5000 == 0:
                line = PHRASE if rng.random() < 0.5 else misspelt(rng, PHRASE)
                planted += 1
            else:
                line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14)))
            lines.append(line)
            size += len(line) + 1
        path.write_text("\n".join(lines) + "\n")
        written += size
        index += 1
    return planted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--mb", type=float, default=30.0, help="megabytes of text (30)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    planted = make(args.directory, args.mb, args.seed)
    print(f"{args.mb:g} MB of text in {args.directory}, {planted} lines with the phrase")


if __name__ == "__main__":
    main()
