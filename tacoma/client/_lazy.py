"""A client's lazy folders: data it sends by reference, and serves to the place that asks.

`tacoma.lazy(path_or_bytes)` is a folder value (`{"DATA": tacoma.lazy("big.csv")}`, or
`-f DATA=@@big.csv` on the command line): the meet carries its reference, not its bytes,
and the data stays in this process. The place the meet goes to names itself the origin
(place.stores._lazy) and asks this client, over the meet's own connection, for the chunks its
agents read; an agent that reads nothing costs nothing but the reference. So a lazy
folder can be read only while its client is connected: for the whole of a sync meet,
and while the process that made an async one lives (for --lazy-seconds at most, the
place's bound).

The data is read when it is asked for: a file named here must not change until the meet
ends (a read of a changed file fails, and so would its hash check). Its manifest (a hash
per chunk) is made once per file and version (size, modification time, inode), so that
sending the same large file again costs no hashing.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from ..wire._briefcase import Briefcase
from ..wire._errors import LazyFolderError, MeetError, NotAllowed
from ..wire._lazy import CHUNK, MAX_FETCH, Lazy, Ref, Source, new_id

__all__ = ["HOLD_SECONDS", "lazy", "serve"]

#: How long this process holds a lazy folder's data for the places it was sent to.
HOLD_SECONDS = 3600.0


class _Held:
    __slots__ = ("expires", "places", "source")

    def __init__(self, source: Source, expires: float) -> None:
        self.source = source
        self.expires = expires
        self.places: set[str] = set()  # the places it was sent to: only they may read it


_held: dict[str, _Held] = {}
#: What this process served of its lazy folders: fetches answered and bytes sent (Accent's
#: "bytes moved", for the benchmarks and tests).
served = {"fetches": 0, "bytes": 0}
#: Sources of files by (path, size, mtime, inode, chunk): their manifests, made once.
_files: dict[tuple[str, int, int, int, int], Source] = {}


def lazy(data: bytes | bytearray | memoryview | str | os.PathLike[str], *,
         chunk: int = CHUNK, seconds: float = HOLD_SECONDS) -> Lazy:
    """A folder value that travels by reference: the bytes given, or a file's (a path).

    Put it in a briefcase as a folder (`{"DATA": tacoma.lazy("big.csv")}`); the agent that
    reads the folder fetches what it reads, `chunk` bytes at a time, from this process,
    which holds the data for `seconds` (and only while connected to the place). The folder
    has one element: the bytes, or the file's content.
    """
    _expire()
    if isinstance(data, str | os.PathLike):
        path = os.path.abspath(os.fspath(data))
        try:
            stat = os.stat(path)
        except OSError as exc:
            raise FileNotFoundError(f"lazy folder: cannot read {data}: {exc.strerror}") \
                from None
        if not Path(path).is_file():
            raise IsADirectoryError(f"lazy folder: {data} is not a file")
        key = (path, stat.st_size, stat.st_mtime_ns, stat.st_ino, chunk)
        source = _files.get(key)
        if source is None:
            source = _files[key] = Source(path=path, chunk=chunk)
    elif isinstance(data, bytes | bytearray | memoryview):
        source = Source([bytes(data)], chunk=chunk)
    else:
        raise TypeError(f"tacoma.lazy takes bytes or a path, got {type(data).__name__}")
    id_ = new_id()
    _held[id_] = _Held(source, time.monotonic() + seconds)
    return Lazy(source.ref("", "", id_), source)


def sending(briefcase: Briefcase, place: str) -> None:
    """A meet to `place` carries `briefcase`: its lazy folders become that place's to read."""
    for ref in briefcase.lazy_refs():
        held = _held.get(ref.id)
        if not ref.origin and held is not None:
            held.places.add(place)


def serve(request: Briefcase, place: str) -> Briefcase:
    """Answer a place's ag_lazy fetch (REF, FIRST, COUNT, MANIFEST) for data sent to it."""
    _expire()
    try:
        (packed,) = request.folder("REF")
        ref = Ref.unpack(packed)
        first, count = int(request.text("FIRST")[0]), int(request.text("COUNT")[0])
    except (ValueError, IndexError, UnicodeDecodeError) as exc:
        raise MeetError(f"a fetch of a lazy folder needs REF, FIRST and COUNT: {exc}") \
            from None
    held = _held.get(ref.id)
    if held is None:
        raise LazyFolderError(f"lazy folder {ref.name}: its client no longer holds it (held "
                              f"{HOLD_SECONDS:g} s at most, or never)")
    if place not in held.places:
        raise NotAllowed(f"lazy folder {ref.name} was not sent to place {place}")
    if first < 0 or count < 1 or first + count > ref.chunks \
            or not held.source.manifest.fits(ref) or count * ref.chunk > MAX_FETCH:
        raise MeetError(f"lazy folder {ref.name}: no chunks {first} to {first + count - 1} "
                        "of that content, in one answer")
    answer = Briefcase(DATA=held.source.read(first, count))
    if request.folder("MANIFEST") == [b"1"]:
        answer["MANIFEST"] = [held.source.manifest.pack()]
    served["fetches"] += 1
    served["bytes"] += answer.size()
    return answer


def _expire() -> None:
    now = time.monotonic()
    for id_ in [i for i, held in _held.items() if held.expires <= now]:
        del _held[id_]
