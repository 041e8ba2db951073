"""Briefcases: named folders of uninterpreted byte strings.

A briefcase is what travels with a meet: an ordered mapping of folder name to a list of byte
strings. It is a plain mutable mapping so that an agent can use it as TACOMA's agents did,
`bc["NAME"].append(b"...")`; it is checked whole when it is encoded for the wire, where a bad
value would otherwise travel. Equality is by value.

A folder may be *lazy* (see _lazy): the briefcase holds a reference to its data, at the
place that keeps it, and reading the folder fetches what is read. `lazy(name)` makes a
folder travel so; `read(name, offset, length)` reads a range without fetching the rest.
Reading and keeping need the agent's channel to its place, which an agent's process
attaches (`attach_lazy`); anywhere else a lazy folder travels on untouched.

This module is imported inside agent processes: standard library and msgpack only.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping

from ._errors import LazyFolderError
from ._lazy import LAZY, Lazy, Ref
from ._text import escape

__all__ = ["CODE", "CODE_HASH", "CODE_NAME", "ENVELOPE", "FRESH", "HOME", "ITINERARY", "LAZY",
           "RECOVERY", "RERUN", "RESERVED_FOLDERS", "TRACE", "Briefcase", "attach_lazy",
           "check_folder_name"]

#: The folder that carries an agent's program (source text for the interpreter agents).
CODE = "CODE"
#: The file name the program came from ("hello.py"), where there is one, so that an agent's
#: error names its own file and line rather than "<agent>"; set by `tacoma meet --code`,
#: `tacoma.meet(code=Path(...))` and the `%%meet` magic, and by the place for an installed
#: agent. Optional: an interpreter without it names the program "<agent>".
CODE_NAME = "CODE_NAME"
#: In place of CODE on the wire: the program named by its hash (wire._program.code_digest),
#: sent by a client to a place that has had the program before (PAN's first step: ship the
#: code once). The place puts CODE back before anything else sees the briefcase, and asks
#: for the program (CodeUnknown) if it does not have it. Never seen by an agent.
CODE_HASH = "CODE_HASH"

#: Folder names with a meaning to the system. CODE is read by interpreter agents; the others
#: belong to the mobility and messaging conventions: ITINERARY (the places still to visit,
#: see place.meets._trips), HOME (a moving agent's trip, taken out by each place before the
#: agent runs), ENVELOPE (a received message's id, kind and sender, see
#: place.meets._residents), and TRACE.
ITINERARY = "ITINERARY"
HOME = "HOME"
ENVELOPE = "ENVELOPE"
#: Present in a meet's briefcase, asks for the meet to be traced (see _trace).
TRACE = "TRACE"
#: Set by the place, and only by it, when it runs an async meet again after a restart: how
#: many times it started before (so that an agent can make its work idempotent).
RERUN = "RERUN"
#: A moving agent's choice of what its rear guard does if a place dies with it on it:
#: "fail" (the default: its home hears the failure), "retry" (hand it to that place again)
#: or "skip" (on to the next place of its ITINERARY). See place.meets._trips.
RECOVERY = "RECOVERY"
#: Present in a meet's briefcase, asks for a fresh worker process for the meet (never a
#: warm one, which served the same program of the same principal before: see
#: place.workers._warm), wherever the agent goes with it.
FRESH = "FRESH"
#: LAZY (see _lazy) carries the references of the briefcase's lazy folders; an agent never
#: sees it, only the folders it names.
RESERVED_FOLDERS = frozenset({CODE, CODE_NAME, CODE_HASH, ITINERARY, HOME, ENVELOPE, TRACE,
                              RERUN, RECOVERY, FRESH, LAZY})

#: The folders of a request to a place's ag_cabinet that say what to do, not what to store
#: (see place.stores._cabinets); a cabinet cannot hold folders by these names.
CABINET_REQUEST_FOLDERS = frozenset({"OP", "CABINET", "FOLDER", "PRIVATE", CODE})

#: Longest folder name accepted: names are labels, not data.
MAX_FOLDER_NAME = 255
#: Most lazy folders one briefcase may carry (each costs the place that relays it a record).
MAX_LAZY_FOLDERS = 1024


def check_folder_name(name: object) -> str:
    """Return `name` if it is a valid folder name, else raise TypeError or ValueError."""
    if not isinstance(name, str):
        raise TypeError(f"folder names are str, got {type(name).__name__}: {name!r}")
    if not name or len(name) > MAX_FOLDER_NAME:
        raise ValueError(f"folder name must be 1 to {MAX_FOLDER_NAME} characters, got {name!r}")
    if not name.isascii():  # ASCII always encodes: the usual names cost no encoding
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"folder name must be valid Unicode text, got {name!r}") from None
    return name


def _as_bytes(value: object, name: str, index: int | None = None) -> bytes:
    """`value` as a folder element (of folder `name`, at `index` if known, for the error)."""
    if type(value) is bytes:
        return value
    if isinstance(value, bytes):  # a subclass: stored as plain bytes
        return bytes(value)
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    where = f"folder {name!r}" + (f" element {index}" if index is not None else "")
    raise TypeError(f"{where}: folder elements are bytes (or str, stored as UTF-8), "
                    f"got {type(value).__name__}")


Fetch = Callable[[Ref, int, int, bool], tuple[bytes | None, list[bytes]]]
Keep = Callable[[str, list[bytes]], Ref]


class _Hooks:
    """How lazy folders' chunks are fetched, and folders' data kept at a place so that it
    can travel by reference (see attach_lazy); None where they cannot be."""

    __slots__ = ("fetch", "keep", "prefetch")

    def __init__(self, fetch: Fetch | None = None, keep: Keep | None = None,
                 prefetch: int = 1) -> None:
        self.fetch = fetch
        self.keep = keep
        self.prefetch = max(0, prefetch)  # chunks fetched after each run of missing ones


#: This process's hooks, and a thread's own where it set them (a thread of a place that
#: runs an agent: see attach_lazy).
_process = _Hooks()
_threads = threading.local()


def _hooks() -> _Hooks:
    hooks: _Hooks | None = getattr(_threads, "hooks", None)
    return hooks if hooks is not None else _process


def attach_lazy(fetch: Fetch | None, keep: Keep | None, prefetch: int = 1,
                this_thread: bool = False) -> None:
    """Say how this process reads lazy folders and keeps folders' data (an agent's process:
    through its channel to its place; a client's: its own store); or, `this_thread`, how
    this thread does (an agent run by a thread of its place, which answers for it alone;
    all None: as the process does again)."""
    global _process
    hooks = _Hooks(fetch, keep, prefetch)
    if not this_thread:
        _process = hooks
    elif fetch is None and keep is None:
        _threads.hooks = None
    else:
        _threads.hooks = hooks


class _Held:
    """A lazy folder in one briefcase: its reference, and the elements it was read as (the
    list the briefcase holds, and their identities then): while the folder holds exactly
    those, it still travels by reference."""

    __slots__ = ("items", "lazy", "snapshot")

    def __init__(self, lazy: Lazy, items: list[bytes] | None = None) -> None:
        self.lazy = lazy
        self.items = items
        self.snapshot = tuple(items) if items is not None else None

    def unchanged(self, folder: list[bytes] | None) -> bool:
        if self.items is None:
            return True  # never read whole: its folder is still the empty placeholder
        snapshot = self.snapshot
        assert snapshot is not None
        return (folder is self.items and len(folder) == len(snapshot)
                and all(a is b for a, b in zip(folder, snapshot, strict=True)))

    def copied(self, folder: list[bytes]) -> _Held:
        return _Held(self.lazy, folder if self.items is not None else None)


def _human_size(count: int) -> str:
    """A byte count as a person reads it: 308 B, 48.2 kB, 50.0 MB."""
    if count < 1000:
        return f"{count} B"
    value, unit = count / 1000, "kB"
    for bigger in ("MB", "GB"):
        if value < 1000:
            break
        value, unit = value / 1000, bigger
    return f"{value:,.1f} {unit}"


def _text_prefix(element: bytes, chars: int) -> str | None:
    """The first `chars` characters of the element if it begins as printable UTF-8 text,
    else None; only the beginning is decoded, however long the element."""
    import codecs

    try:
        text = codecs.getincrementaldecoder("utf-8")().decode(element[:chars * 4])
    except UnicodeDecodeError:
        return None
    text = text[:chars]
    if not all(c.isprintable() or c in "\n\t\r" for c in text):
        return None
    return text


class Briefcase(MutableMapping[str, list[bytes]]):
    """An ordered mapping of folder name to a list of byte strings.

    >>> bc = Briefcase(NAME=["world"])
    >>> bc.append("GREETING", "hello, world")
    >>> bc["GREETING"]
    [b'hello, world']

    Text given where bytes are expected is stored as UTF-8.
    """

    __slots__ = ("_folders", "_lazy")

    def __init__(
        self,
        folders: Mapping[str, Iterable[bytes | str] | Lazy] | None = None,
        /,
        **named: Iterable[bytes | str] | Lazy,
    ) -> None:
        self._folders: dict[str, list[bytes]] = {}
        self._lazy: dict[str, _Held] | None = None
        if type(folders) is Briefcase:
            # A copy of a briefcase (every meet's request is one): its names were checked
            # when it got them, so only elements put into its lists since are looked at;
            # its lazy folders stay lazy.
            for name, folder in folders._folders.items():
                self._folders[name] = (folder[:] if all(type(e) is bytes for e in folder)
                                       else [_as_bytes(e, name) for e in folder])
            if folders._lazy:
                self._copy_lazy(folders)
            if not named:
                return
            folders = None  # then the named folders, below
        if folders is not None and not isinstance(folders, Mapping):
            raise TypeError(f"a briefcase is built from a mapping of folder name to elements, "
                            f"got {type(folders).__name__}")
        for source in (folders or {}, named):
            for name, elements in source.items():
                self[name] = elements

    # -- mapping protocol: bc["NAME"] is the folder's own list, so mutating it changes bc.
    def __getitem__(self, name: str) -> list[bytes]:
        if self._lazy and name in self._lazy:
            self._fetch_whole(name)
        return self._folders[name]

    def __setitem__(self, name: str, elements: Iterable[bytes | str] | Lazy) -> None:
        check_folder_name(name)
        if isinstance(elements, Lazy):  # tacoma.lazy(...): a folder that travels by reference
            if name in RESERVED_FOLDERS:
                raise ValueError(f"folder {name} cannot be lazy: the system reads it")
            self._folders[name] = []
            if self._lazy is None:
                self._lazy = {}
            self._lazy[name] = _Held(elements.renamed(name))
            return
        if (isinstance(elements, bytes | bytearray | str | memoryview | Mapping)
                or not isinstance(elements, Iterable)):
            raise TypeError(f"folder {name!r}: assign a list of elements (bytes or str), not "
                            f"a {type(elements).__name__}")
        self._folders[name] = [_as_bytes(e, name) for e in elements]
        if self._lazy:
            self._lazy.pop(name, None)

    def __delitem__(self, name: str) -> None:
        del self._folders[name]
        if self._lazy:
            self._lazy.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(self._folders)

    def __contains__(self, name: object) -> bool:
        return name in self._folders  # a lazy folder is there, and is not fetched to say so

    def __len__(self) -> int:
        return len(self._folders)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Briefcase):
            return self._folders == other._folders and self._refs() == other._refs()
        if isinstance(other, Mapping):
            return not self._refs() and self._folders == dict(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable: not hashable

    # -- how a person sees it: short, whatever the briefcase holds. A briefcase may hold
    # megabytes; its repr goes into logs and tracebacks, its HTML into a notebook's file, so
    # both show a bounded preview: the first elements of the first folders, cut short.
    # Written here, with the standard library only (an agent's process imports this
    # module), rather than with tacoma.display's tables.

    #: The repr's bounds: folders, elements per folder, characters of one element's repr.
    _REPR_FOLDERS, _REPR_ELEMENTS, _REPR_CHARS = 10, 3, 40
    #: The HTML's bounds: folders, elements per folder, characters of a text element,
    #: bytes of a binary one (in hex), characters of the program shown in CODE's fold.
    _HTML_FOLDERS, _HTML_ELEMENTS, _HTML_CHARS, _HTML_HEX, _HTML_PROGRAM = 50, 10, 200, 16, 4000

    def __repr__(self) -> str:
        """Briefcase(NAME=[b'world'], PHOTO=[<48.2 kB binary>], CODE=[<program, 308 B>]):
        the constructor's form while elements are short, a summary of what is not."""
        lazy = self._refs()

        def element(name: str, value: bytes) -> str:
            if name == CODE:
                return f"<program, {_human_size(len(value))}>"
            shown = repr(value[:self._REPR_CHARS + 1])
            if len(shown) <= self._REPR_CHARS:
                return shown
            if _text_prefix(value, self._REPR_CHARS) is None:
                return f"<{_human_size(len(value))} binary>"
            return f"<{_human_size(len(value))}: {value[:self._REPR_CHARS // 2]!r}...>"

        parts = []
        for name, elements in list(self._folders.items())[:self._REPR_FOLDERS]:
            if name in lazy:
                ref = lazy[name]
                parts.append(f"{escape(name)}=<lazy: {_human_size(ref.size)} in "
                             f"{ref.count:,} element{'s' if ref.count != 1 else ''} at "
                             f"{escape(ref.origin) or 'the client'}>")
                continue
            shown = [element(name, e) for e in elements[:self._REPR_ELEMENTS]]
            if len(elements) > self._REPR_ELEMENTS:
                shown.append(f"... {len(elements) - self._REPR_ELEMENTS:,} more")
            parts.append(f"{escape(name)}=[{', '.join(shown)}]")
        if len(self._folders) > self._REPR_FOLDERS:
            parts.append(f"... {len(self._folders) - self._REPR_FOLDERS:,} more folders")
        return f"Briefcase({', '.join(parts)})"

    def _repr_html_(self) -> str:
        """A table of the folders for a notebook: each folder's element count and its first
        elements (text cut short, binary as its size and first bytes in hex); CODE folded
        away. Everything escaped, and bounded whatever the briefcase holds."""
        import html

        rows = []
        lazy = self._refs()
        for name, elements in list(self._folders.items())[:self._HTML_FOLDERS]:
            if name in lazy:
                ref = lazy[name]
                cell = (f"<span style='color:#666'>lazy: {_human_size(ref.size)} in "
                        f"{ref.count:,} element{'s' if ref.count != 1 else ''} at "
                        f"{html.escape(escape(ref.origin) or 'the client')}, fetched as "
                        "read</span>")
            elif name == CODE:
                cell = _html_program(elements, self._folders.get(CODE_NAME, [b""]))
            else:
                cell = "".join(f"<div>{_html_element(e)}</div>"
                               for e in elements[:self._HTML_ELEMENTS])
                if len(elements) > self._HTML_ELEMENTS:
                    cell += (f"<div style='color:#666'>and "
                             f"{len(elements) - self._HTML_ELEMENTS:,} more</div>")
            rows.append(f"<tr><td style='text-align:left;vertical-align:top'><b>"
                        f"{html.escape(escape(name))}</b></td><td style='text-align:right;"
                        f"vertical-align:top'>{len(elements):,}</td>"
                        f"<td style='text-align:left'>{cell}</td></tr>")
        if len(self._folders) > self._HTML_FOLDERS:
            rows.append(f"<tr><td colspan='3' style='text-align:left;color:#666'>and "
                        f"{len(self._folders) - self._HTML_FOLDERS:,} more folders</td></tr>")
        count = sum(len(e) for e in self._folders.values())
        caption = (f"Briefcase: {len(self._folders):,} folder"
                   f"{'' if len(self._folders) == 1 else 's'}, {count:,} element"
                   f"{'' if count == 1 else 's'}, {_human_size(self.size())}"
                   if self._folders else "Briefcase: empty")
        return (f"<table><caption style='text-align:left'>{html.escape(caption)}</caption>"
                "<thead><tr><th style='text-align:left'>folder</th>"
                "<th style='text-align:right'>elements</th>"
                "<th style='text-align:left'>contents</th></tr></thead>"
                f"<tbody>{''.join(rows)}</tbody></table>")

    # -- the operations agents need, named as in the agent API table (docs/reference/agent-api.md).
    def folder(self, name: str) -> list[bytes]:
        """The folder's elements (its own list); an empty list if there is no such folder."""
        if self._lazy and name in self._lazy:
            self._fetch_whole(name)
        return self._folders.get(name, [])

    def text(self, name: str) -> list[str]:
        """The folder's elements decoded as UTF-8."""
        return [e.decode("utf-8") for e in self.folder(name)]

    def append(self, name: str, element: bytes | str) -> None:
        """Append one element to a folder, creating the folder if needed."""
        check_folder_name(name)
        value = _as_bytes(element, name)  # checked before the folder is made
        if self._lazy and name in self._lazy:
            self._fetch_whole(name)  # appending to a lazy folder: read it, then it has data
        self._folders.setdefault(name, []).append(value)

    def setdefault(self, name: str, default: Iterable[bytes | str] = ()) -> list[bytes]:
        """The folder's own list, created from `default` if absent (so appends stick)."""
        if name not in self._folders:
            self[name] = default
        return self[name]

    def replace(self, name: str, elements: Iterable[bytes | str]) -> None:
        """Replace a folder's elements."""
        self[name] = elements

    def remove(self, name: str) -> list[bytes]:
        """Remove a folder and return its elements (empty if there was none; a lazy
        folder's are not fetched for this)."""
        if self._lazy:
            self._lazy.pop(name, None)
        return self._folders.pop(name, [])

    def folders(self) -> list[str]:
        """The folder names, in order."""
        return list(self._folders)

    def copy(self) -> Briefcase:
        """A copy whose folders can be changed without touching this one."""
        out = Briefcase()
        out._folders = {name: list(elements) for name, elements in self._folders.items()}
        if self._lazy:
            out._copy_lazy(self)
        return out

    def _copy_lazy(self, source: Briefcase) -> None:
        """Take `source`'s lazy folders that still travel by reference (this briefcase
        holds copies of its folders' lists)."""
        assert source._lazy is not None
        self._lazy = {name: held.copied(self._folders[name])
                      for name, held in source._lazy.items()
                      if name in source._folders and held.unchanged(source._folders[name])}

    def swapped(self, old: str, new: str, elements: list[bytes]) -> Briefcase:
        """A briefcase with folder `old` replaced, in its place, by `new` holding `elements`;
        the other folders are this one's own lists, not copies (for the wire: see CODE_HASH).
        """
        out = Briefcase()
        out._folders = {(new if name == old else name): (elements if name == old else folder)
                        for name, folder in self._folders.items()}
        out._lazy = dict(self._lazy) if self._lazy else None
        return out

    def wire_size(self) -> int:
        """Bytes of names and elements it carries on the wire: a lazy folder not read here
        counts as its reference, not as its data (a place's accounting: see _residents)."""
        refs = self._refs()
        return (sum(len(name) + sum(len(e) for e in folder)
                    for name, folder in self._folders.items() if name not in refs)
                + sum(len(name) + len(ref.pack()) for name, ref in refs.items()))

    def at_least(self, elements: int, nbytes: int) -> bool:
        """Whether it holds at least `elements` elements, or `nbytes` bytes in them, as they
        are here (a lazy folder not read is not fetched to be counted). Cheap whatever the
        size: elements are counted per folder, and their bytes summed only below
        `elements` of them."""
        folders = self._folders.values()
        if sum(map(len, folders)) >= elements:
            return True
        return sum(map(len, itertools.chain.from_iterable(folders))) >= nbytes

    def size(self) -> int:
        """Total bytes held in elements (not counting names or framing; a lazy folder not
        yet read counts its whole size, as if it were here)."""
        lazy = sum(ref.size for name, ref in self._refs().items()
                   if self._lazy is not None and self._lazy[name].items is None)
        return lazy + self.held()

    def held(self) -> int:
        """Bytes of elements held in this process's memory (a lazy folder not yet read
        holds none): what a worker counts against what an agent may keep."""
        return sum(len(e) for elements in self._folders.values() for e in elements)

    # -- lazy folders (see _lazy)
    def _refs(self) -> dict[str, Ref]:
        """The references of the folders that travel lazily now."""
        if not self._lazy:
            return {}
        return {name: held.lazy.ref for name, held in self._lazy.items()
                if name in self._folders and held.unchanged(self._folders[name])}

    def _fetch_whole(self, name: str) -> None:
        assert self._lazy is not None
        held = self._lazy[name]
        if held.items is not None:
            return
        hooks = _hooks()
        items = held.lazy.elements(hooks.fetch, hooks.prefetch)
        self._folders[name] = items
        held.items, held.snapshot = items, tuple(items)

    def is_lazy(self, name: str) -> bool:
        """Whether folder `name` travels by reference (see `lazy`)."""
        return name in self._refs()

    def lazy(self, name: str) -> None:
        """Make folder `name` travel by reference from here on: its data is kept at this
        place (an agent's) or by this client, and a meet that carries this briefcase
        fetches only what its agent reads. Already lazy: nothing to do."""
        if name not in self._folders:
            raise KeyError(f"no folder {name!r} to make lazy")
        if name in RESERVED_FOLDERS:
            raise ValueError(f"folder {name} cannot be lazy: the system reads it")
        if name in self._refs():
            return
        keep = _hooks().keep
        if keep is None:
            raise LazyFolderError("nothing here can keep a lazy folder's data: an agent's "
                                  "place keeps it, or a client's (tacoma.lazy)")
        items = self._folders[name]
        ref = keep(name, list(items))
        if self._lazy is None:
            self._lazy = {}
        self._lazy[name] = _Held(Lazy(ref), items)

    def read(self, name: str, offset: int = 0, length: int | None = None) -> bytes:
        """Bytes of folder `name`'s elements joined end to end, `length` of them (all if
        None) from `offset`; of a lazy folder, only the chunks this range needs are fetched.
        An empty string past the end, or for a missing folder."""
        if offset < 0 or (length is not None and length < 0):
            raise ValueError(f"read: offset and length are at least 0, got {offset}, {length}")
        if self._lazy and name in self._lazy and self._lazy[name].items is None:
            lazy = self._lazy[name].lazy
            size = lazy.ref.size
            hooks = _hooks()
            return lazy.read(hooks.fetch, offset, size if length is None else length,
                             hooks.prefetch)
        folder = self._folders.get(name, [])
        end = None if length is None else offset + length
        if len(folder) == 1:  # the usual data folder: slice it, with no copy of the rest
            return folder[0][offset:end]
        return b"".join(folder)[offset:end]

    def folder_size(self, name: str) -> int:
        """Bytes in folder `name`'s elements (a lazy folder's, without fetching it)."""
        if self._lazy and name in self._lazy and self._lazy[name].items is None:
            return self._lazy[name].lazy.ref.size
        return sum(len(e) for e in self._folders.get(name, ()))

    # -- wire form
    def to_wire(self) -> dict[str, list[bytes]]:
        """The plain dict sent on the wire, every element checked to be bytes."""
        out: dict[str, list[bytes]] = {}
        refs = self._refs() if self._lazy else {}
        if LAZY in self._folders:
            raise ValueError(f"folder name {LAZY} is reserved for the references of lazy "
                             "folders")
        for name, elements in self._folders.items():
            check_folder_name(name)
            if name in refs:
                out[name] = []
                continue
            if not isinstance(elements, list):
                raise TypeError(f"folder {name!r} must be a list, got {type(elements).__name__}")
            if all(type(e) is bytes for e in elements):
                # As usual: the list itself, no conversion and no copy (a copy of twenty
                # million elements held the GIL for 85 ms). What takes the wire form only
                # reads it, and a briefcase being sent is not changed meanwhile.
                out[name] = elements
            else:
                out[name] = [_as_bytes(e, name, i) for i, e in enumerate(elements)]
        if refs:
            out[LAZY] = [ref.pack() for ref in refs.values()]
        return out

    @classmethod
    def from_wire(cls, value: object) -> Briefcase:
        """Build from the wire form; raises TypeError or ValueError on anything else."""
        if not isinstance(value, dict):
            raise TypeError(f"a briefcase is a map, got {type(value).__name__}")
        bc = cls()
        for name, elements in value.items():
            check_folder_name(name)
            if not isinstance(elements, list) or not all(isinstance(e, bytes) for e in elements):
                raise TypeError(f"folder {name!r} must be a list of bytes")
            bc._folders[name] = elements
        if LAZY in bc._folders:
            bc._lazy = {}
            if len(bc._folders[LAZY]) > MAX_LAZY_FOLDERS:
                raise ValueError(f"a briefcase holds at most {MAX_LAZY_FOLDERS} lazy folders")
            for packed in bc._folders.pop(LAZY):
                ref = Ref.unpack(packed)
                if ref.name in RESERVED_FOLDERS:  # the place reads those: never lazy
                    raise ValueError(f"folder {ref.name} cannot be lazy: the system reads it")
                if bc._folders.get(ref.name) != [] or ref.name in bc._lazy:
                    raise ValueError(f"lazy folder {ref.name!r}: the briefcase must hold it "
                                     "once, empty, beside its reference")
                bc._lazy[ref.name] = _Held(Lazy(ref))
        return bc

    def with_origin(self, origin: str, rename: Callable[[Ref], str],
                    seal: Callable[[Ref], Ref] | None = None) -> None:
        """Give the lazy folders that name no origin (a client's, on their way) `origin`, the
        id `rename` gives each, and `seal`'s seal (a place relays for its client: see
        place.stores._lazy)."""
        for held in (self._lazy or {}).values():
            ref = held.lazy.ref
            if not ref.origin:
                moved = ref.moved_to(origin, rename(ref))
                held.lazy = Lazy(seal(moved) if seal is not None else moved)

    def lazy_refs(self) -> list[Ref]:
        """The references of the folders that travel lazily (for a place's checks)."""
        return list(self._refs().values())


def _html_element(value: bytes) -> str:
    """One element in a briefcase's HTML table: text cut short, binary as its size and
    first bytes in hex."""
    import html

    text = _text_prefix(value, Briefcase._HTML_CHARS)
    if text is None:
        head = value[:Briefcase._HTML_HEX].hex(" ")
        more = " ..." if len(value) > Briefcase._HTML_HEX else ""
        return (f"<span style='color:#666'>{_human_size(len(value))} binary:</span> "
                f"<code>{head}{more}</code>")
    cut = len(text.encode("utf-8")) < len(value)
    more = (f" <span style='color:#666'>... ({_human_size(len(value))})</span>"
            if cut else "")
    return f"<pre style='margin:0;white-space:pre-wrap'>{html.escape(text)}</pre>{more}"


def _html_program(elements: list[bytes], name: list[bytes]) -> str:
    """The CODE folder in a briefcase's HTML table: folded away, named by CODE_NAME."""
    import html

    source = b"\n".join(elements)
    label = escape(name[0].decode("utf-8", "replace")[:Briefcase._HTML_CHARS]) if name else ""
    text = source[:Briefcase._HTML_PROGRAM * 4].decode("utf-8", "replace")
    shown = text[:Briefcase._HTML_PROGRAM]
    more = "\n..." if len(shown.encode("utf-8")) < len(source) else ""
    summary = f"program{' ' + label if label else ''}, {_human_size(len(source))}"
    return (f"<details><summary>{html.escape(summary)}</summary>"
            f"<pre style='white-space:pre-wrap'>{html.escape(shown + more)}</pre></details>")
