"""ag_lazy: the data of lazy folders (wire._lazy), kept at their origin and read from anywhere.

Accent's copy-on-reference (seeds/003) at a place. Two requests, both meets of ag_lazy:

- keep (an agent here, `lazy(name)`): the place keeps the folder's data for --lazy-seconds,
  within --lazy-bytes for all of them, and answers its reference (this place, a random id,
  the size, the root hash of its manifest);
- fetch (REF, FIRST, COUNT, and MANIFEST for the first): the chunks FIRST..FIRST+COUNT-1,
  and the manifest if asked. The data is this place's: only the principal whose agent (or
  client) made it may read it, and a reference whose hash is not the data's is refused.
  A reference to another place's data is fetched from that place, for the principal of
  the agent that reads it, through the place's connections (so an agent reads a lazy
  folder through its own place, wherever the data is: it has no network of its own).

The reader checks every chunk against the manifest, and the manifest against the
reference; a place that kept or relayed the data cannot change what is read unseen.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ...client._client import ClientCache
from ...trust._passport import Papers, Passport
from ...wire._address import canonical_address
from ...wire._briefcase import Briefcase
from ...wire._errors import (
    ConnectError,
    LazyFolderError,
    LimitExceeded,
    MeetError,
    NotAllowed,
    TransportError,
    TrustError,
)
from ...wire._lazy import CHUNK, MAX_COUNT, Ref, Source, new_id
from ...wire._names import LAZY_AGENT
from ...wire._text import shown
from .._settings import PlaceSettings

if TYPE_CHECKING:
    from ...trust._seal import Seals

__all__ = ["LazyStore"]

log = logging.getLogger("tacoma.place")

#: Room a fetch's answer leaves in a frame for its framing.
_MARGIN = 64 * 1024
#: What a kept folder is charged beyond its data: per element (its end in the manifest),
#: and per record.
_PER_ELEMENT, _PER_RECORD = 48, 1024
#: Lazy folders one client connection may have this place relay at once, and ids of those
#: whose clients are gone that it remembers.
MAX_RELAYED = 4096
MAX_GONE = 65536


@dataclass(slots=True)
class _Kept:
    source: Source
    owner: str  # the principal that may read it
    expires: float  # monotonic
    cost: int  # what it is charged against --lazy-bytes: its data, elements and record


class _Client(Protocol):
    """The session of a client whose lazy folders this place relays (see _sessions)."""

    async def ask(self, request: Briefcase, timeout: float) -> Briefcase: ...


@dataclass(slots=True)
class _Relayed:
    """A lazy folder a client sent: its data stays with the client, and this place asks for
    it over the client's connection, for whichever place reads it."""

    client: _Client
    ref: Ref  # as the client named it
    owner: str
    expires: float


class LazyStore:
    """The lazy folders' data this place keeps, and its reads of others' (see the module)."""

    def __init__(self, address: str, settings: PlaceSettings, clients: ClientCache,
                 seals: Seals | None = None) -> None:
        self.address = address
        self.limit = settings.lazy_bytes
        self.lifetime = settings.lazy_seconds
        self.max_frame = settings.max_frame
        #: Both in the order they were made, and all with one lifetime: the oldest are first,
        #: so expiring looks at as many as expire, and one more.
        self.kept: dict[str, _Kept] = {}
        self.relayed: dict[str, _Relayed] = {}
        #: Ids of relayed folders whose client is gone, until they would have expired (at
        #: most MAX_GONE): a read of one says so.
        self.gone: dict[str, float] = {}
        self.share = settings.share  # the part of --lazy-bytes any one principal may hold
        self.by_owner: collections.Counter[str] = collections.Counter()
        self.by_client: collections.Counter[int] = collections.Counter()  # relays per session
        self.bytes = 0
        #: Connections to other places, to read their data (the place's, as itself).
        self.clients = clients
        #: This place's seals on the references it makes, and its checks of others' (None
        #: on an --insecure place, where nothing is authenticated: see trust._seal).
        self.seals = seals

    async def serve(self, request: Briefcase, principal: str, agent_here: bool,
                    timeout: float, origins: set[str] | frozenset[str] = frozenset(),
                    passport: Passport | None = None) -> Briefcase:
        """Answer a meet of ag_lazy (see the module) for `principal`; `agent_here`: made by an
        agent at this place (only those keep data here, or have it read elsewhere, and
        only from `origins`, where the lazy folders handed to it are, under its
        `passport`: another place gives a principal's data only to its passport)."""
        op = request.text("OP")
        if op == ["keep"]:
            if not agent_here:
                raise NotAllowed(f"{LAZY_AGENT} keeps data for the agents at this place only")
            return await self._keep(request, principal)
        if op != ["fetch"]:
            raise MeetError(f"{LAZY_AGENT}: OP is keep or fetch, got {op!r}")
        ref, first, count, manifest = self._fetch_request(request)
        if not self._here(ref.origin):
            if not agent_here:  # nobody else makes this place connect anywhere for them
                raise NotAllowed(f"{LAZY_AGENT} fetches another place's data for the agents "
                                 f"at this place only (the data is at {ref.origin})")
            if canonical(ref.origin) not in origins:
                # Else an agent could name any host:port and have its place connect there
                # (a port scanner inside the place's network): only origins of folders
                # handed to it, which a client could not name (see Session.accept).
                raise NotAllowed(f"lazy folder {ref.name}: no lazy folder handed to this "
                                 f"agent is at {ref.origin}; its place reads from those only")
            self._check_seal(ref)
            return await self._forward(ref, request, principal, timeout, passport)
        relayed = self.relayed.get(ref.id)
        if relayed is not None:
            return await self._ask_client(relayed, ref, request, principal, timeout)
        if ref.id in self.gone:
            raise LazyFolderError(f"lazy folder {ref.name}: the client that sent it is gone "
                                  "(a client's lazy folder can be read while it stays "
                                  "connected)")
        kept = self._find(ref, principal)
        self._fits(ref, count, manifest)
        chunks = (kept.source.read(first, count) if kept.source.path is None
                  else await asyncio.to_thread(kept.source.read, first, count))
        answer = Briefcase(DATA=chunks)
        if manifest:
            answer["MANIFEST"] = [kept.source.manifest.pack()]
        return answer

    def _here(self, origin: str) -> bool:
        return bool(origin) and canonical(origin) == self.address

    def seal(self, ref: Ref) -> Ref:
        """`ref`, which names this place's data, with this place's seal."""
        return ref if self.seals is None else ref.with_seal(self.seals.seal(ref.sealed()))

    def _check_seal(self, ref: Ref) -> None:
        """LazyFolderError unless `ref`, naming another place's data, bears that place's
        seal: checked before any connection is made (see trust._seal)."""
        if self.seals is None:
            return
        host = ref.origin.rsplit(":", 1)[0]
        try:
            self.seals.check(ref.seal, ref.sealed(), host)
        except TrustError as exc:
            raise LazyFolderError(f"lazy folder {ref.name}: its reference to data at "
                                  f"{ref.origin} is refused: {exc}") from None

    def foreign(self, ref: Ref) -> bool:
        """Whether `ref`'s data is at another place (not this one, nor its client's)."""
        return bool(ref.origin) and not self._here(ref.origin)

    def _fetch_request(self, request: Briefcase) -> tuple[Ref, int, int, bool]:
        try:
            (packed,) = request.folder("REF")
            ref = Ref.unpack(packed)
            first, count = int(request.text("FIRST")[0]), int(request.text("COUNT")[0])
        except (ValueError, IndexError, UnicodeDecodeError) as exc:
            raise MeetError(f"{LAZY_AGENT}: a fetch needs REF (one reference), FIRST and "
                            f"COUNT: {exc}") from None
        if first < 0 or count < 1 or first + count > ref.chunks:
            raise MeetError(f"{LAZY_AGENT}: chunks {first} to {first + count - 1} are not "
                            f"all in lazy folder {ref.name} ({ref.chunks} chunks)")
        return ref, first, count, request.folder("MANIFEST") == [b"1"]

    def _fits(self, ref: Ref, count: int, manifest: bool) -> None:
        """LimitExceeded unless the answer fits a frame (the layout is the data's own: the
        reference was checked against it)."""
        size = count * ref.chunk + (32 * ref.chunks + 9 * ref.count if manifest else 0)
        if size > self.max_frame - _MARGIN:
            raise LimitExceeded(f"{LAZY_AGENT}: {count} chunks of {ref.chunk:,} bytes"
                                f"{' and the manifest' if manifest else ''} do not fit in "
                                f"one frame of {self.max_frame:,} bytes")

    def may_relay(self, client: _Client, owner: str, count: int) -> None:
        """LimitExceeded unless this place may relay `count` more lazy folders that `owner`
        sent over `client`'s connection: at most MAX_RELAYED for one connection, and each
        record charged _PER_RECORD against --lazy-bytes and `owner`'s share of it (records
        are memory: a principal reconnecting in a loop must not pile them up)."""
        self._expire()
        if self.by_client[id(client)] + count > MAX_RELAYED:
            raise LimitExceeded(f"place {self.address} relays at most {MAX_RELAYED:,} lazy "
                                "folders for one connection at once")
        self._may_keep(owner, count * _PER_RECORD, f"{count} lazy folders to relay")

    def _may_keep(self, owner: str, cost: int, what: str) -> None:
        if self.bytes + cost > self.limit:
            raise LimitExceeded(f"place {self.address} keeps at most {self.limit:,} bytes of "
                                f"lazy folders ({self.bytes:,} now): {what} ({cost:,} "
                                "bytes) cannot be kept")
        own = max(_PER_RECORD, int(self.limit * self.share))
        if self.by_owner[owner] + cost > own:
            raise LimitExceeded(f"{owner or 'anonymous'} keeps {self.by_owner[owner]:,} bytes "
                                f"of lazy folders at place {self.address}, which lets any one "
                                f"principal keep {own:,} (--share of --lazy-bytes)")

    def relay(self, client: _Client, owner: str, ref: Ref) -> str:
        """A client sent lazy folder `ref` in a meet here (`may_relay` said so): the id this
        place names it by (this place is its origin now, and asks the client for its
        chunks)."""
        id_ = new_id()
        self.relayed[id_] = _Relayed(client, ref, owner, time.monotonic() + self.lifetime)
        self.by_client[id(client)] += 1
        self.bytes += _PER_RECORD
        self.by_owner[owner] += _PER_RECORD
        return id_

    async def _ask_client(self, relayed: _Relayed, ref: Ref, request: Briefcase,
                          principal: str, timeout: float) -> Briefcase:
        if relayed.expires <= time.monotonic():
            raise LazyFolderError(f"lazy folder {ref.name}: place {self.address} relayed it "
                                  f"for {self.lifetime:g} s, and no longer does")
        if relayed.owner != principal:
            raise NotAllowed(f"lazy folder {ref.name}: its data at {self.address} is not "
                             f"{principal or 'anonymous'}'s to read")
        mine = relayed.ref
        if (mine.root, mine.size, mine.count, mine.chunk) != (ref.root, ref.size, ref.count,
                                                              ref.chunk):
            raise LazyFolderError(f"lazy folder {ref.name}: the reference's hash or layout is "
                                  f"not that of the data {self.address} relays under its id")
        asked = Briefcase(request)
        asked["REF"] = [relayed.ref.pack()]
        return await relayed.client.ask(asked, timeout)

    def _find(self, ref: Ref, principal: str) -> _Kept:
        self._expire()
        kept = self.kept.get(ref.id)
        if kept is None:
            raise LazyFolderError(f"lazy folder {ref.name}: place {self.address} no longer "
                                  f"holds its data (kept {self.lifetime:g} s, or never)")
        if kept.owner != principal:
            raise NotAllowed(f"lazy folder {ref.name}: its data at {self.address} is not "
                             f"{principal or 'anonymous'}'s to read")
        if not kept.source.manifest.fits(ref):
            raise LazyFolderError(f"lazy folder {ref.name}: the reference's hash or layout is "
                                  f"not that of the data {self.address} holds under its id")
        return kept

    async def _forward(self, ref: Ref, request: Briefcase, principal: str,
                       timeout: float, passport: Passport | None) -> Briefcase:
        """A fetch of another place's data: asked of that place, for `principal` under its
        agent's `passport` (without one, this place asks as itself)."""
        if not ref.origin:
            raise LazyFolderError(f"lazy folder {ref.name}: its reference names no origin")
        try:
            client = await self.clients.get(ref.origin, timeout=min(timeout, 10.0))
            answer = await asyncio.wait_for(
                client.meet(LAZY_AGENT, request, "sync", timeout,
                            principal if passport is not None else "",
                            papers=Papers(passport.raw).to_wire() if passport else b""),
                timeout)
        except (ConnectError, TransportError, TimeoutError) as exc:
            # Said alike whatever went wrong (refused, silent, not a place): what the
            # origin's host answered is the place's log's business, not an agent's.
            log.info("lazy folder %s: its origin %s cannot be reached: %s",
                     shown(ref.name, 80), shown(ref.origin, 80), exc)
            raise LazyFolderError(f"lazy folder {ref.name}: its origin {ref.origin} cannot "
                                  "be reached") from None
        assert isinstance(answer, Briefcase)
        return answer

    async def _keep(self, request: Briefcase, principal: str) -> Briefcase:
        names = request.text("NAME")
        if len(names) != 1:
            raise MeetError(f"{LAZY_AGENT}: keep needs the folder's NAME")
        elements = request.folder("DATA")
        if len(elements) > MAX_COUNT:
            raise LimitExceeded(f"a lazy folder holds at most {MAX_COUNT:,} elements")
        # Charged: the data, each element's place in the manifest, and the record itself.
        cost = sum(len(e) for e in elements) + _PER_ELEMENT * len(elements) + _PER_RECORD
        self._expire()
        self._may_keep(principal, cost, f"folder {names[0]}")
        self.bytes += cost  # held now, so that two keeps at once cannot both pass
        self.by_owner[principal] += cost
        try:
            source = await asyncio.to_thread(Source, elements, None, CHUNK)
        except BaseException:
            self.bytes -= cost
            self.by_owner[principal] -= cost
            raise
        id_ = new_id()
        self.kept[id_] = _Kept(source, principal, time.monotonic() + self.lifetime, cost)
        log.debug("keeping lazy folder %s (%d bytes) as %s", names[0], source.size, id_)
        return Briefcase(REF=[self.seal(source.ref(names[0], self.address, id_)).pack()])

    def _expire(self) -> None:
        now = time.monotonic()
        while self.kept:
            id_, kept = next(iter(self.kept.items()))
            if kept.expires > now:
                break
            del self.kept[id_]
            self.bytes -= kept.cost
            self.by_owner[kept.owner] -= kept.cost
            if not self.by_owner[kept.owner]:
                del self.by_owner[kept.owner]
        while self.relayed:
            id_, relayed = next(iter(self.relayed.items()))
            if relayed.expires > now:
                break
            self._unrelay(id_)
        while self.gone:
            id_, until = next(iter(self.gone.items()))
            if until > now and len(self.gone) <= MAX_GONE:
                break
            del self.gone[id_]

    def _unrelay(self, id_: str) -> None:
        relayed = self.relayed.pop(id_)
        self.bytes -= _PER_RECORD
        self.by_owner[relayed.owner] -= _PER_RECORD
        if self.by_owner[relayed.owner] <= 0:
            del self.by_owner[relayed.owner]
        key = id(relayed.client)
        self.by_client[key] -= 1
        if self.by_client[key] <= 0:
            del self.by_client[key]

    def relaying(self, client: _Client) -> int:
        """How many lazy folders this place relays for `client` now."""
        self._expire()
        return self.by_client.get(id(client), 0)

    def forget(self, client: _Client) -> None:
        """The client's connection closed: what it held is gone. Its records go (and what
        they were charged), each leaving only its id and expiry behind, so that a read
        still says why it fails."""
        if self.by_client.get(id(client)):
            for id_ in [i for i, r in self.relayed.items() if r.client is client]:
                self.gone[id_] = self.relayed[id_].expires
                self._unrelay(id_)
            self._expire()

    def status(self) -> dict[str, int]:
        self._expire()
        return {"kept": len(self.kept), "bytes": self.bytes, "relayed": len(self.relayed)}


def canonical(origin: str) -> str:
    """An origin as places compare addresses ("" if it is not one)."""
    try:
        return canonical_address(origin)
    except ValueError:
        return ""
