"""An agrep-like search agent: the lines of a place's data files that match a pattern with
at most ERRORS errors (insertions, deletions, substitutions), as agrep finds them.

Sent to the data (`tacoma meet ag_python@PLACE --code search.py -f PATTERN=... -f ERRORS=1`)
it scans the files under $TACOMA_DATA/DIR (the place's data directory; DIR is "." unless
given) and returns MATCHES ("FILE:LINE:TEXT", at most MAX of them), with SCANNED (bytes
read), FILES and CPU (seconds of its own CPU). LIMIT, if given, stops after that many
bytes: a trial run, for the CPU a byte costs (`tacoma advise`). The same functions scan
data fetched to the client (fetch.py), so both ways run one algorithm.

The matcher is Wu and Manber's (agrep's own): a pattern of m <= 63 characters with k errors
matches wherever one of its k+1 pieces occurs exactly (pigeonhole), so only lines holding a
piece (found by `in`, in C) go through the bit-parallel shift-and automaton with k errors.
"""

from __future__ import annotations

import os
import time


def pieces(pattern: bytes, errors: int) -> list[bytes]:
    """k+1 pieces of the pattern: any match with k errors holds one of them unchanged."""
    count = errors + 1
    size = len(pattern) // count
    return [pattern[i * size:(i + 1) * size if i < count - 1 else len(pattern)]
            for i in range(count)]


def approximate(text: bytes, pattern: bytes, errors: int) -> bool:
    """Whether `pattern` occurs in `text` with at most `errors` edits (shift-and, Wu-Manber
    1992: bit i of R[d] says pattern[:i+1] ends here with d edits at most)."""
    m = len(pattern)
    masks: dict[int, int] = {}
    for i, c in enumerate(pattern):
        masks[c] = masks.get(c, 0) | (1 << i)
    accept = 1 << (m - 1)
    r = [(1 << d) - 1 for d in range(errors + 1)]
    for c in text:
        mask = masks.get(c, 0)
        before = r[0]
        r[0] = ((r[0] << 1) | 1) & mask
        for d in range(1, errors + 1):
            was = r[d]
            r[d] = ((((was << 1) | 1) & mask) | ((before << 1) | 1) | before
                    | ((r[d - 1] << 1) | 1))
            before = was
        if r[errors] & accept:
            return True
    return False


def scan(data: bytes, pattern: bytes, errors: int, name: str, found: list[bytes],
         most: int) -> None:
    """Append the matching lines of `data` (a file's bytes) to `found`, up to `most`."""
    parts = pieces(pattern, errors)
    for number, line in enumerate(data.split(b"\n"), 1):
        if any(p in line for p in parts) and approximate(line, pattern, errors):
            found.append(b"%s:%d:%s" % (name.encode(), number, line))
            if len(found) >= most:
                return


def check(pattern: bytes, errors: int) -> None:
    if not 0 <= errors <= 8 or not errors < len(pattern) <= 63:
        raise ValueError(f"a pattern of 1 to 63 bytes, longer than ERRORS (0 to 8), got "
                         f"{len(pattern)} bytes with {errors} errors")


def files(root: str) -> list[tuple[str, str]]:
    """(name relative to root, path) of every file below root, in a stable order."""
    out = []
    for directory, dirs, names in os.walk(root):
        dirs.sort()
        for name in sorted(names):
            path = os.path.join(directory, name)
            out.append((os.path.relpath(path, root), path))
    return out


def agent(bc) -> None:
    pattern = bc["PATTERN"][0]
    errors = int(bc.text("ERRORS")[0]) if bc.folder("ERRORS") else 1
    most = int(bc.text("MAX")[0]) if bc.folder("MAX") else 1000
    limit = int(bc.text("LIMIT")[0]) if bc.folder("LIMIT") else None
    check(pattern, errors)
    root = os.path.join(os.environ["TACOMA_DATA"], bc.text("DIR")[0] if bc.folder("DIR")
                        else ".")
    started = time.process_time()
    found: list[bytes] = []
    scanned = count = 0
    for name, path in files(root):
        with open(path, "rb") as file:
            data = file.read(limit - scanned if limit is not None else -1)
        scan(data, pattern, errors, name, found, most)
        scanned += len(data)
        count += 1
        if len(found) >= most or (limit is not None and scanned >= limit):
            break
    bc["MATCHES"] = found
    bc["SCANNED"], bc["FILES"] = [str(scanned)], [str(count)]
    bc["CPU"] = [repr(time.process_time() - started)]


if "bc" in globals():  # run as an agent (tacoma meet ... --code search.py)
    agent(bc)  # type: ignore[name-defined]
