"""Passports: a principal's signed word for what its agent may do at other places.

A place of the cluster may be broken into, or run by another team, so no place may speak
for a principal on its own say-so. When a client launches an agent, it signs, with its own
identity's key, a small statement, the agent's *passport*: the principal, the agent and the
hash of its program, the launch's meet id, the places the agent may visit (patterns of
addresses or place names; "*": any place of the cluster), a deadline, and what the agent
may do on the principal's behalf there (`MAY`). The passport travels with the agent on
every hop and with every meet the agent makes; a place accepts a principal other than its
peer's own name only under a valid passport of that principal (see place.meets._passports).

Each place that hands an agent on adds a *line* of its own, sealed with its identity
(trust._seal): which trip and hop, from where to where, when, and the hashes of the
briefcase it got and the one it handed on. The trip's home checks the lines when the trip
ends: the path a result took, and the place that changed a briefcase between two hops.

ECDSA P-256 over SHA-256, as the identities' keys are; `cryptography` does the work (the
standard library has no signatures). Signing takes about 50 us at launch; a place checks a
passport once (about 300 us: the certificate, then the signature) and remembers it by its
hash for as long as it runs, so an agent's second meet pays a dictionary lookup.

What a place may read without checking (`Papers.read`, `Passport.read`) is only msgpack:
the client and the meet path parse papers without `cryptography`; `Signer` and `Verifier`
import it.
"""

from __future__ import annotations

import datetime
import fnmatch
import hashlib
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

import msgpack

from ..wire._briefcase import Briefcase
from ..wire._errors import NotAuthorized, TrustError
from ..wire._lazy import LAZY
from ._store import serial_text

if TYPE_CHECKING:
    from ._seal import Issued
    from ._store import Bundle
    from ._tls import DenyList

__all__ = [
    "ANY_PLACE",
    "ANY_PROGRAM",
    "MAX_LINES",
    "MAY",
    "Line",
    "Papers",
    "Passport",
    "PathStep",
    "Signer",
    "Verifier",
    "briefcase_digest",
]

#: What an agent may do for its principal at other places, each named in its passport:
#:   meet     meet agents there (a program it carries must be the passport's own)
#:   move     go there (`go`), as a hop of its trip
#:   cabinet  use the cabinets there (ag_cabinet)
#:   lazy     read the principal's lazy folders' data kept there (ag_lazy)
#:   status   see what became of the meets of its own launch there (ag_status)
MAY = ("meet", "move", "cabinet", "lazy", "status")
#: The itinerary that admits every place of the cluster; and the program list that lets any
#: program run for the principal (the launcher gives up the program check: see
#: docs/security/passports.md).
ANY_PLACE = "*"
ANY_PROGRAM = "*"
#: Seconds by which clocks of a cluster may differ: a deadline is that much generous.
SKEW = 60.0
#: The longest a passport lives when its meet has no timeout.
DEFAULT_SECONDS = 24 * 3600.0
#: Lines an agent carries at most: the home's, and the latest (a trip of thousands of hops
#: would otherwise carry hundreds of kilobytes of them).
MAX_LINES = 64
#: Passports a place remembers as checked.
_CHECKED_MOST = 4096


def _fail(why: str) -> NotAuthorized:
    return NotAuthorized(f"invalid passport: {why}")


def briefcase_digest(briefcase: Briefcase) -> str:
    """The SHA-256 of a briefcase's folders (names and elements, each with its length, in
    name order; a lazy folder by its reference, never its data), as hop lines name what a
    place got and handed on."""
    digest = hashlib.sha256()
    wire = briefcase.to_wire()
    for name in sorted(wire):
        encoded = name.encode("utf-8", "surrogatepass")
        digest.update(len(encoded).to_bytes(8, "big"))
        digest.update(encoded)
        folder = wire[name] if name != LAZY else sorted(wire[name])
        digest.update(len(folder).to_bytes(8, "big"))
        for element in folder:
            digest.update(len(element).to_bytes(8, "big"))
            digest.update(element)
    return digest.hexdigest()


def _malformed(what: str) -> str:
    return "the papers are malformed" if what == "papers" else f"its {what} is malformed"


def _unpack(raw: bytes, what: str) -> list[object]:
    try:
        value = msgpack.unpackb(raw, raw=False, max_bin_len=1 << 20, max_str_len=4096,
                                max_array_len=1024, max_map_len=64, strict_map_key=True)
    except Exception:  # noqa: BLE001 - whatever is malformed, it is not papers
        raise _fail(_malformed(what)) from None
    if not isinstance(value, list):
        raise _fail(_malformed(what))
    return value


@dataclass(frozen=True, slots=True)
class Passport:
    """A passport, as read from its wire form (`raw`: [statement, certificate, signature]);
    `Verifier.verify` says whether its signature holds."""

    principal: str
    agent: str  # the agent launched: its language's, or an installed agent's name
    #: Hex digests of the programs it may run for its principal (wire._program.code_digest
    #: of a CODE folder): the launched one first ("" for an agent without one), then any
    #: its launcher named for the agents it starts elsewhere; "*": any program.
    programs: tuple[str, ...]
    meet: str  # the launch's meet id
    places: tuple[str, ...]  # patterns of addresses or place names; ("*",): any place
    deadline: float  # time.time() after which it is void
    may: frozenset[str]
    issued: float
    raw: bytes
    digest: str  # hex SHA-256 of `raw`: how places know it

    @classmethod
    def read(cls, raw: bytes) -> Passport:
        """The passport `raw` says, unchecked (NotAuthorized if it is malformed)."""
        parts = _unpack(raw, "passport")
        if len(parts) != 3 or not all(isinstance(p, bytes) for p in parts):
            raise _fail("it is not [statement, certificate, signature]")
        fields = _unpack(parts[0], "statement")  # type: ignore[arg-type]  # bytes, checked
        try:
            version, principal, agent, programs, meet, places, deadline, may, issued = fields
            if version != 1:
                raise _fail(f"version {version!r} is not one this place reads")
            texts = (principal, agent, meet)
            if not all(isinstance(t, str) for t in texts) or not isinstance(places, list) \
                    or not isinstance(programs, list) or not programs \
                    or not all(isinstance(p, str) for p in programs) \
                    or not all(isinstance(p, str) for p in places) or not isinstance(may, list) \
                    or not all(isinstance(m, str) for m in may) \
                    or not isinstance(deadline, int | float) \
                    or not isinstance(issued, int | float):
                raise _fail("its statement is malformed")
        except ValueError:
            raise _fail("its statement is malformed") from None
        return cls(str(principal), str(agent), tuple(programs), str(meet), tuple(places),
                   float(deadline), frozenset(may), float(issued), raw,
                   hashlib.sha256(raw).hexdigest())

    @property
    def statement(self) -> bytes:
        return _unpack(self.raw, "passport")[0]  # type: ignore[return-value]  # read checked

    def admits(self, address: str, name: str) -> bool:
        """Whether its itinerary admits the place at `address` whose identity is `name`."""
        return any(pattern == ANY_PLACE or fnmatch.fnmatchcase(address, pattern)
                   or (name and fnmatch.fnmatchcase(name, pattern)) for pattern in self.places)

    def check_at(self, addresses: Collection[str], name: str,
                 now: float | None = None) -> None:
        """NotAuthorized unless it holds now at the place named `name` that is known by
        `addresses` (its own, and on a wildcard listen those its certificate names)."""
        if (now if now is not None else time.time()) > self.deadline + SKEW:
            raise _fail(f"it expired at {_when(self.deadline)} (its deadline)")
        if not any(self.admits(address, name) for address in addresses):
            raise _fail(f"its itinerary ({', '.join(self.places)}) does not admit place "
                        f"{', '.join(sorted(addresses))}" + (f" ({name})" if name else ""))

    def runs(self, program: str) -> bool:
        """Whether it lets the program whose digest is `program` run for its principal."""
        return program in self.programs or ANY_PROGRAM in self.programs

    def allows(self, what: str) -> None:
        """NotAuthorized unless it lets the agent do `what` (one of MAY)."""
        if what not in self.may:
            raise _fail(f"it does not let the agent {_SAID[what]} for {self.principal} "
                        f"(it allows: {', '.join(sorted(self.may)) or 'nothing'})")


_SAID = {"meet": "meet agents", "move": "move here", "cabinet": "use cabinets",
         "lazy": "read lazy folders' data", "status": "see meets' statuses"}


def _when(moment: float) -> str:
    return datetime.datetime.fromtimestamp(moment, datetime.UTC).strftime(
        "%Y-%m-%d %H:%M:%S UTC")


@dataclass(frozen=True, slots=True)
class Line:
    """One place's signed line on a trip: it handed hop `hop` of trip `trip` on, from
    `came` (its own address) to `went` (the next place; the home, with `ended`), at `at`,
    having got the briefcase whose digest is `got` ("" at the home) and handed on `sent`."""

    trip: str
    hop: int
    came: str
    went: str
    at: float
    got: str
    sent: str
    passport: str  # the passport's digest ("" for an agent without one)
    ended: bool
    place: str = ""  # the sealing place's identity, once checked
    raw: bytes = b""

    def statement(self) -> bytes:
        packed: bytes = msgpack.packb([1, self.trip, self.hop, self.came, self.went, self.at,
                                       self.got, self.sent, self.passport, self.ended],
                                      use_bin_type=True)
        return packed

    def pack(self, seal: bytes) -> bytes:
        """Its wire form, [statement, seal] (`seal`: its sealing place's, on statement())."""
        packed: bytes = msgpack.packb([self.statement(), seal], use_bin_type=True)
        return packed

    @classmethod
    def read(cls, raw: bytes) -> tuple[Line, bytes, bytes]:
        """The line `raw` says, its statement and its seal, unchecked."""
        parts = _unpack(raw, "hop line")
        if len(parts) != 2 or not all(isinstance(p, bytes) for p in parts):
            raise _fail("a hop line is not [statement, seal]")
        statement, seal = parts
        fields = _unpack(statement, "hop line")  # type: ignore[arg-type]  # bytes, checked
        try:
            version, trip, hop, came, went, at, got, sent, passport, ended = fields
        except ValueError:
            raise _fail("a hop line is malformed") from None
        if version != 1 or not all(isinstance(t, str) for t in
                                   (trip, came, went, got, sent, passport)) \
                or not isinstance(hop, int) or not isinstance(at, int | float) \
                or not isinstance(ended, bool):
            raise _fail("a hop line is malformed")
        line = cls(str(trip), hop, str(came), str(went), float(at), str(got), str(sent),
                   str(passport), ended, raw=raw)
        return line, statement, seal  # type: ignore[return-value]  # bytes, checked


@dataclass(frozen=True, slots=True)
class PathStep:
    """One hand-over on the path a trip's result took, as its home checked the signed line
    of the place that made it: `place` (its identity) handed the agent on from `came` to
    `went` (the home, if `ended`: the trip ended there) at `at` (time.time()), with the
    briefcase whose SHA-256 is `sent`; `note` says what does not add up ("": all does)."""

    place: str
    came: str
    went: str
    at: float
    sent: str
    ended: bool
    note: str = ""

    def to_wire(self) -> list[object]:
        return [self.place, self.came, self.went, self.at, self.sent, self.ended, self.note]

    def __str__(self) -> str:
        did = "ended, sent home to" if self.ended else "handed on to"
        note = f"  !! {self.note}" if self.note else ""
        return (f"{self.place} ({self.came}) {did} {self.went}, briefcase {self.sent[:12]}"
                f"{note}")


@dataclass(frozen=True, slots=True)
class Papers:
    """What travels beside a meet's briefcase (the Meet's `papers`): the agent's passport
    (b"" if it has none) and the lines of the places that handed it on."""

    passport: bytes = b""
    lines: tuple[bytes, ...] = ()

    def to_wire(self) -> bytes:
        if not self.passport and not self.lines:
            return b""
        packed: bytes = msgpack.packb([self.passport, list(self.lines)], use_bin_type=True)
        return packed

    @classmethod
    def read(cls, raw: bytes) -> Papers:
        """The papers `raw` carries (NotAuthorized if malformed)."""
        if not raw:
            return cls()
        parts = _unpack(raw, "papers")
        if len(parts) != 2 or not isinstance(parts[0], bytes) or not isinstance(parts[1], list) \
                or not all(isinstance(line, bytes) for line in parts[1]):
            raise _fail("the papers are not [passport, lines]")
        if len(parts[1]) > MAX_LINES:
            raise _fail(f"they carry {len(parts[1])} hop lines, more than the "
                        f"{MAX_LINES} a trip keeps")
        return cls(parts[0], tuple(parts[1]))

    def with_line(self, line: bytes) -> Papers:
        """These papers with one more line (the home's first line and the latest kept)."""
        lines = (*self.lines, line)
        if len(lines) > MAX_LINES:
            lines = (lines[0], *lines[len(lines) - MAX_LINES + 1:])
        return Papers(self.passport, lines)


class Signer:
    """A client's side: signs its agents' passports with its identity's key."""

    def __init__(self, bundle: Bundle) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        key = serialization.load_pem_private_key(bundle.key, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise NotAuthorized(f"identity {bundle.path} has no EC key to sign passports "
                                "with: issue it again (tacoma trust issue)")
        certificate = x509.load_pem_x509_certificate(bundle.certificate)
        self._key = key
        self._sign = ec.ECDSA(hashes.SHA256())
        self.certificate = certificate.public_bytes(serialization.Encoding.DER)
        self.name = str(certificate.subject.get_attributes_for_oid(
            NameOID.COMMON_NAME)[0].value)

    def passport(self, *, agent: str, programs: tuple[str, ...], meet: str,
                 places: tuple[str, ...], deadline: float,
                 may: frozenset[str] | tuple[str, ...]) -> bytes:
        """A passport of this identity's for one launch (see the module)."""
        unknown = set(may) - set(MAY)
        if unknown:
            raise ValueError(f"a passport may allow {', '.join(MAY)}, not "
                             f"{', '.join(sorted(unknown))}")
        if not places:
            raise ValueError("a passport's itinerary names at least one place (or '*')")
        statement: bytes = msgpack.packb(
            [1, self.name, agent, list(programs), meet, list(places), deadline,
             [m for m in MAY if m in may], time.time()], use_bin_type=True)
        signature = self._key.sign(statement, self._sign)
        raw: bytes = msgpack.packb([statement, self.certificate, signature],
                                   use_bin_type=True)
        return raw


class Verifier:
    """A place's side: checks passports (signed by an identity of this cluster's CA, whose
    name is the principal, current and not revoked), remembering those checked."""

    def __init__(self, ca: bytes, deny_list: DenyList, issued: Issued | None = None) -> None:
        from cryptography import x509

        from ._seal import Issued

        #: Certificates whose CA signature was checked (shared with the place's Seals).
        self.issued = issued or Issued(x509.load_pem_x509_certificate(ca))
        self._deny = deny_list
        #: Passports checked, by digest: the passport and its signer's certificate serial.
        self._checked: dict[str, tuple[Passport, str]] = {}

    def verify(self, raw: bytes) -> tuple[Passport, str]:
        """The passport `raw` and its signer's certificate serial, if it is signed by its
        principal's certificate; NotAuthorized saying why not otherwise."""
        digest = hashlib.sha256(raw).hexdigest()
        known = self._checked.get(digest)
        if known is None:
            known = self._check(raw)
            if len(self._checked) >= _CHECKED_MOST:
                self._checked.clear()
            self._checked[digest] = known
        if known[1] in self._deny.serials:
            raise _fail(f"it is signed by a revoked certificate of {known[0].principal} "
                        f"(serial {known[1]})")
        return known

    def _check(self, raw: bytes) -> tuple[Passport, str]:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        passport = Passport.read(raw)
        _, der, signature = _unpack(raw, "passport")
        if not isinstance(der, bytes):
            raise _fail("its certificate is malformed")
        try:
            certificate = self.issued.load(der)
        except TrustError as exc:
            raise _fail("it is not signed by an identity of this cluster's CA (its "
                        f"certificate {exc})") from None
        now = datetime.datetime.now(datetime.UTC)
        if not certificate.not_valid_before_utc <= now <= certificate.not_valid_after_utc:
            raise _fail("its signer's certificate is not valid now")
        names = certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        if not names or str(names[0].value) != passport.principal:
            raise _fail(f"it names {passport.principal!r} but is signed by "
                        f"{str(names[0].value) if names else 'nobody'!r}")
        public = certificate.public_key()
        if not isinstance(public, ec.EllipticCurvePublicKey):
            raise _fail("its signer's certificate has no EC key")
        try:
            public.verify(signature, passport.statement, ec.ECDSA(hashes.SHA256()))  # type: ignore[arg-type]
        except (InvalidSignature, TypeError):
            raise _fail("its signature does not match its statement (changed after it was "
                        "signed)") from None
        return passport, serial_text(certificate.serial_number)
