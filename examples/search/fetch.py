"""Search the other way: fetch a place's files through fileserver.py and scan them here.

    from fetch import fetch_and_scan
    matches, scanned = fetch_and_scan("127.0.0.1:7707", b"mobile agents meet", errors=1)

The same search.py functions scan, so the two ways differ only in where the bytes are read
and the CPU is spent: that is the question `tacoma advise` and `tacoma bench movecode` ask.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import tacoma

HERE = Path(__file__).parent
_spec = importlib.util.spec_from_file_location("search", HERE / "search.py")
assert _spec is not None
assert _spec.loader is not None
search = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(search)

#: Bytes of files fetched per meet (well inside a place's --max-briefcase).
BATCH = 8 * 1024 * 1024


def fetch_and_scan(address: str, pattern: bytes, errors: int = 1, directory: str = ".",
                   most: int = 1000, batch: int = BATCH,
                   timeout: float = 600) -> tuple[list[bytes], int]:
    """The matching lines ("FILE:LINE:TEXT") of the place's files, and the bytes fetched."""
    search.check(pattern, errors)
    server = (HERE / "fileserver.py").read_text()
    listing = tacoma.meet(f"ag_python@{address}", {"OP": ["list"], "DIR": [directory]},
                         code=server, timeout=timeout)
    files = list(zip(listing.text("NAMES"), (int(s) for s in listing.text("SIZES")),
                     strict=True))
    found: list[bytes] = []
    fetched = 0
    while files and len(found) < most:
        names, size = [], 0
        while files and (not names or size + files[0][1] <= batch):
            name, length = files.pop(0)
            names.append(name)
            size += length
        got = tacoma.meet(f"ag_python@{address}", {"OP": ["read"], "DIR": [directory],
                                                   "NAME": names}, code=server,
                          timeout=timeout)
        for name, data in zip(names, got["DATA"], strict=True):
            search.scan(data, pattern, errors, name, found, most)
            fetched += len(data)
            if len(found) >= most:
                break
    return found, fetched
