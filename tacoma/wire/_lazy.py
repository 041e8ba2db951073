"""Lazy folders: a folder that travels by reference, its data fetched where it is read.

Accent's copy-on-reference (Zayas, seeds/003), for briefcases: instead of a folder's bytes
a briefcase carries a `Ref` (the folder's name, the place that holds the data, an id there,
its size, its element count, its chunk size and a root hash), in the reserved folder LAZY;
the folder itself is there, empty, so that it keeps its place among the folders. An agent
that reads the folder fetches the chunks it touches through its place from the origin
(place.stores._lazy), each checked against the folder's manifest, with `prefetch` chunks after
each one it lacks (Accent found one always pays). An agent that never reads it never
fetches it; one that passes it on (a meet, a move) passes the reference.

The data of a lazy folder is its elements joined end to end; `Manifest` says where each
element ends and the SHA-256 of each chunk, and its own hash is the Ref's `root`, so that a
chunk is checked on its own (as BitTorrent checks pieces against an info hash) and a
reference names exactly one content.

Standard library and msgpack only: workers import this.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import itertools
import os
import secrets
from dataclasses import dataclass

import msgpack

from ._errors import LazyFolderError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    #: How a reader gets chunks it lacks: fetch(ref, first, count, manifest) returns the
    #: manifest's bytes (if asked for) and the chunks first..first+count-1.
    Fetch = Callable[["Ref", int, int, bool], tuple[bytes | None, list[bytes]]]

__all__ = ["CHUNK", "LAZY", "Lazy", "Manifest", "Ref", "Source", "new_id"]

#: The reserved folder that carries a briefcase's lazy folders' references.
LAZY = "LAZY"
#: Bytes per chunk unless the origin says otherwise: the unit fetched and checked.
CHUNK = 64 * 1024
#: Bounds a reference is checked against when it arrives (a forged one is a bad frame).
MAX_CHUNK = 16 * 1024 * 1024
MAX_SIZE = 1 << 40
MAX_COUNT = 1 << 20
#: The largest seal a reference carries (a place's certificate and signature).
MAX_SEAL = 4096
#: What a seal says it is about (so that a seal on anything else never passes for one).
SEAL_CONTEXT = "tacoma lazy folder reference 1"
#: Bytes a reader asks for in one fetch at most (a whole read of a large folder is many):
#: well inside any place's frames (--max-briefcase is at least 64 KiB; a chunk of more
#: than this is fetched alone).
MAX_FETCH = 8 * 1024 * 1024
#: Chunks a reader keeps, beyond what a whole read holds: a bound on its memory for range
#: reads of a large folder (the least recently used go first).
CACHE_BYTES = 64 * 1024 * 1024


def new_id() -> str:
    """An id for data an origin holds: 128 random bits, so that it cannot be guessed."""
    return secrets.token_hex(16)


@dataclass(frozen=True, slots=True)
class Ref:
    """What a briefcase carries for a lazy folder (see the module's doc)."""

    name: str
    origin: str  # the place that holds the data ("" while a client's meet is on its way)
    id: str
    size: int
    count: int
    chunk: int
    root: bytes
    #: The origin's seal on what names the data (`sealed`): a place reads another place's
    #: data only under its seal (see trust._seal); "" until the origin seals it.
    seal: bytes = b""

    @property
    def chunks(self) -> int:
        return -(-self.size // self.chunk)

    def sealed(self) -> bytes:
        """What the origin's seal covers: where the data is and what it is (not the
        folder's name, which a briefcase may change)."""
        packed: bytes = msgpack.packb([SEAL_CONTEXT, self.origin, self.id, self.size,
                                       self.count, self.chunk, self.root], use_bin_type=True)
        return packed

    def pack(self) -> bytes:
        fields = [self.name, self.origin, self.id, self.size, self.count, self.chunk,
                  self.root]
        if self.seal:
            fields.append(self.seal)
        packed: bytes = msgpack.packb(fields, use_bin_type=True)
        return packed

    @classmethod
    def unpack(cls, data: bytes) -> Ref:
        """A Ref from its packed form; ValueError if it is not one."""
        try:
            value = msgpack.unpackb(data, raw=False, max_bin_len=MAX_SEAL, max_str_len=1024,
                                    max_array_len=16)
        except Exception as exc:  # noqa: BLE001 - msgpack raises several kinds
            raise ValueError(f"a LAZY element is not a lazy folder's reference: {exc}") from None
        if (not isinstance(value, list) or len(value) not in (7, 8)
                or not all(isinstance(v, str) for v in value[:3])
                or not all(type(v) is int for v in value[3:6])
                or not all(isinstance(v, bytes) for v in value[6:])):
            raise ValueError("a LAZY element is not a lazy folder's reference")
        ref = cls(*value)
        if not (0 <= ref.size <= MAX_SIZE and 0 <= ref.count <= MAX_COUNT
                and 1 <= ref.chunk <= MAX_CHUNK and len(ref.root) == 32
                and (ref.count > 0 or ref.size == 0)):
            raise ValueError(f"lazy folder {ref.name!r}: its reference is out of bounds")
        return ref

    def moved_to(self, origin: str, id_: str) -> Ref:
        """The data at `origin` under `id_` (unsealed until that origin seals it)."""
        return Ref(self.name, origin, id_, self.size, self.count, self.chunk, self.root)

    def named(self, name: str) -> Ref:
        return dataclasses.replace(self, name=name)

    def with_seal(self, seal: bytes) -> Ref:
        return dataclasses.replace(self, seal=seal)


@dataclass(frozen=True, slots=True)
class Manifest:
    """Where each element ends in the joined data, each chunk's SHA-256, and the chunk size
    (so that the root hash names the layout too)."""

    ends: tuple[int, ...]
    hashes: bytes  # 32 bytes per chunk
    chunk: int

    def pack(self) -> bytes:
        packed: bytes = msgpack.packb([list(self.ends), self.hashes, self.chunk],
                                      use_bin_type=True)
        return packed

    def fits(self, ref: Ref) -> bool:
        """Whether `ref` names this manifest's data, layout and all (an origin's check of
        what it is asked for)."""
        return (ref.chunk == self.chunk and ref.count == len(self.ends)
                and ref.size == (self.ends[-1] if self.ends else 0)
                and ref.root == self.root())

    def root(self) -> bytes:
        return hashlib.sha256(self.pack()).digest()

    @classmethod
    def of(cls, ref: Ref, data: bytes) -> Manifest:
        """Check a manifest's bytes against `ref`; LazyFolderError if they are not its."""
        if hashlib.sha256(data).digest() != ref.root:
            raise LazyFolderError(f"lazy folder {ref.name}: its manifest does not match the "
                                  "reference's hash (the data changed at its origin, or was "
                                  "tampered with)")
        misfit = LazyFolderError(f"lazy folder {ref.name}: its manifest does not fit its "
                                 "reference")
        try:
            ends, hashes, chunk = msgpack.unpackb(
                data, raw=False, max_array_len=max(3, ref.count),
                max_bin_len=32 * ref.chunks, max_str_len=0, max_map_len=0, max_ext_len=0)
        except Exception:  # noqa: BLE001 - msgpack raises several kinds: all say "not it"
            raise misfit from None
        if (not isinstance(ends, list) or not isinstance(hashes, bytes)
                or len(ends) != ref.count or len(hashes) != 32 * ref.chunks
                or chunk != ref.chunk or (ends and ends[-1] != ref.size)
                or not all(type(e) is int and 0 <= e <= ref.size for e in ends)
                or any(a > b for a, b in itertools.pairwise(ends))):
            raise misfit
        return cls(tuple(ends), hashes, chunk)

    def check(self, ref: Ref, index: int, chunk: bytes) -> None:
        expected = min(ref.chunk, ref.size - index * ref.chunk)
        if (len(chunk) != expected or hashlib.sha256(chunk).digest()
                != self.hashes[32 * index:32 * index + 32]):
            raise LazyFolderError(f"lazy folder {ref.name}: chunk {index} does not match its "
                                  "hash (the data changed at its origin, or was tampered "
                                  "with)")


class Source:
    """A lazy folder's data where it is held: elements in memory, or a file (`path`), read
    by chunks. A file is checked unchanged (size and modification time) at every read."""

    def __init__(self, elements: Sequence[bytes] | None = None, path: str | None = None,
                 chunk: int = CHUNK) -> None:
        if not 1 <= chunk <= MAX_CHUNK:
            raise ValueError(f"chunk must be 1 to {MAX_CHUNK} bytes, got {chunk}")
        self.chunk = chunk
        self.path = path
        self._data = b""
        if path is not None:
            stat = os.stat(path)
            self._stat = (stat.st_size, stat.st_mtime_ns, stat.st_ino)
            size, ends = stat.st_size, [stat.st_size]
        else:
            self._data = b"".join(elements or ())
            size, ends, at = len(self._data), [], 0
            for element in elements or ():
                at += len(element)
                ends.append(at)
        self.size = size
        hashes = bytearray()
        if path is None:
            view = memoryview(self._data)  # chunks hashed in place, not copied
            for at in range(0, size, chunk):
                hashes += hashlib.sha256(view[at:at + chunk]).digest()
        else:  # one pass in order, a chunk at a time (a file may be larger than memory)
            with open(path, "rb") as file:
                while block := file.read(chunk):
                    hashes += hashlib.sha256(block).digest()
            if len(hashes) != 32 * -(-size // chunk):
                raise LazyFolderError(f"{path} changed while it was being hashed")
        self.manifest = Manifest(tuple(ends), bytes(hashes), chunk)
        self.root = self.manifest.root()

    def ref(self, name: str, origin: str, id_: str) -> Ref:
        return Ref(name, origin, id_, self.size, len(self.manifest.ends), self.chunk, self.root)

    def read(self, first: int, count: int) -> list[bytes]:
        """Chunks first..first+count-1 (those that exist)."""
        start, end = first * self.chunk, min(self.size, (first + count) * self.chunk)
        if self.path is None:
            data = self._data[start:end]
        else:
            with open(self.path, "rb") as file:
                stat = os.fstat(file.fileno())
                if (stat.st_size, stat.st_mtime_ns, stat.st_ino) != self._stat:
                    raise LazyFolderError(f"{self.path} changed after it was sent as a lazy "
                                          "folder")
                data = os.pread(file.fileno(), max(0, end - start), start)
        return [data[at:at + self.chunk] for at in range(0, len(data), self.chunk)]

    def elements(self) -> list[bytes]:
        data = self._data if self.path is None else b"".join(self.read(0, self.size))
        starts = (0, *self.manifest.ends[:-1])
        return [data[a:b] for a, b in zip(starts, self.manifest.ends, strict=True)]




class Lazy:
    """A lazy folder as a briefcase holds it: its reference, and what was read of it.

    `source` is set where the data is held here (the origin's own briefcase): reads come
    from it. Elsewhere reads call `fetch` for the chunks they lack, `prefetch` more after
    each run of missing chunks, and check each against the manifest.
    """

    __slots__ = ("_cache", "_cached", "_manifest", "fetched", "ref", "source")

    def __init__(self, ref: Ref, source: Source | None = None) -> None:
        self.ref = ref
        self.source = source
        self._manifest: Manifest | None = source.manifest if source is not None else None
        self._cache: collections.OrderedDict[int, bytes] = collections.OrderedDict()
        self._cached = 0
        #: Bytes fetched from the origin so far (for the benchmarks: Accent's bytes moved).
        self.fetched = 0

    def renamed(self, name: str) -> Lazy:
        copy = Lazy(self.ref.named(name), self.source)
        copy._manifest = self._manifest
        return copy

    def read(self, fetch: Fetch | None, offset: int, length: int, prefetch: int = 1) -> bytes:
        """`length` bytes of the joined data from `offset` (fewer at its end)."""
        ref = self.ref
        if offset < 0 or length < 0:
            raise ValueError("offset and length are at least 0")
        end = min(ref.size, offset + length)
        if offset >= end:
            return b""
        first, last = offset // ref.chunk, (end - 1) // ref.chunk
        if self.source is not None:
            chunks = self.source.read(first, last - first + 1)
        else:
            chunks = self._chunks(fetch, first, last, prefetch)
        data = b"".join(chunks)
        base = first * ref.chunk
        return data[offset - base:end - base]

    def _chunks(self, fetch: Fetch | None, first: int, last: int, prefetch: int) -> list[bytes]:
        ref = self.ref
        if fetch is None:
            where = ref.origin or "its client"
            raise LazyFolderError(f"folder {ref.name} is lazy (its data is at {where}) and "
                                  "nothing here can fetch it: an agent reads lazy folders")
        got: dict[int, bytes] = {}
        index = first
        while index <= last:
            if index in self._cache:
                self._cache.move_to_end(index)
                got[index] = self._cache[index]
                index += 1
                continue
            run = index
            while run <= last and run not in self._cache:
                run += 1
            end = run  # then up to `prefetch` chunks more, that are not here either
            while end < min(ref.chunks, run + max(0, prefetch)) and end not in self._cache:
                end += 1
            count = max(1, min(end - index, MAX_FETCH // ref.chunk))  # a frame's worth
            run = min(run, index + count)
            manifest, chunks = fetch(ref, index, count, self._manifest is None)
            if self._manifest is None:
                if manifest is None:
                    raise LazyFolderError(f"lazy folder {ref.name}: its origin sent no "
                                          "manifest")
                self._manifest = Manifest.of(ref, manifest)
            if len(chunks) != count:
                raise LazyFolderError(f"lazy folder {ref.name}: asked its origin for {count} "
                                      f"chunks from {index}, got {len(chunks)}")
            for at, chunk in enumerate(chunks, index):
                self._manifest.check(ref, at, chunk)
                self.fetched += len(chunk)
                self._keep(at, chunk)
                if at <= last:
                    got[at] = chunk
            index = run
        return [got[i] for i in range(first, last + 1)]

    def _keep(self, index: int, chunk: bytes) -> None:
        self._cache[index] = chunk
        self._cached += len(chunk)
        while self._cached > CACHE_BYTES and len(self._cache) > 1:
            _, dropped = self._cache.popitem(last=False)
            self._cached -= len(dropped)

    def elements(self, fetch: Fetch | None, prefetch: int = 1) -> list[bytes]:
        """The folder's elements, whole (every chunk not yet read is fetched)."""
        if self.source is not None:
            return self.source.elements()
        data = self.read(fetch, 0, self.ref.size, prefetch)
        assert self._manifest is not None or self.ref.size == 0
        ends = self._manifest.ends if self._manifest is not None else ()
        if self.ref.size == 0:  # nothing to fetch: its elements are all empty
            return [b""] * self.ref.count
        starts = (0, *ends[:-1])
        return [data[a:b] for a, b in zip(starts, ends, strict=True)]
