"""Who this process is when it meets a place: its identity, or (closed networks) none.

Every connection to a place is mutual TLS (see tacoma.trust): the client shows the
certificate of its identity and checks the place's. Which identity, in order: the one given
to `use_identity` (the CLI's --identity), $TACOMA_IDENTITY, the trust directory's default
(the user's own, made with the first local place or `tacoma trust init`). A name is looked
up in the trust directory; a path names an identity file copied from the CA's host.

`use_identity(insecure=True)` (--insecure, $TACOMA_INSECURE=1) speaks plaintext instead,
to places started with --insecure on a closed test network.

A place in this process (the embedded place) registers the context its own clients use to
reach it (`register_place`): it has a CA of its own that nobody else holds.
"""

from __future__ import annotations

import functools
import logging
import os
import secrets
import ssl
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..trust._store import IDENTITY_ENV, Bundle, TrustStore, insecure_from_env
from ..trust._tls import client_context
from ..wire._briefcase import CODE, CODE_HASH, Briefcase
from ..wire._errors import TrustError
from ..wire._names import BUILT_IN, LAZY_AGENT, MAILBOX_AGENT
from ..wire._program import code_digest

if TYPE_CHECKING:
    from ..trust._passport import Signer

__all__ = ["Credentials", "Terms", "credentials", "current_principal", "register_place",
           "use_identity"]

#: Agents whose meets need no passport: the places' own, which run no program of the
#: principal's and meet nobody for it.
_NO_PASSPORT = frozenset({*BUILT_IN, LAZY_AGENT, MAILBOX_AGENT})
#: What a passport allows unless its launcher says otherwise (trust._passport.MAY; here
#: too so that importing the client does not import `cryptography`).
MAY_ALL = ("meet", "move", "cabinet", "lazy", "status")


@dataclass(frozen=True)
class Terms:
    """What an agent's passport lets it do for its principal at other places (see
    trust._passport): the places it may visit (patterns of HOST:PORT addresses or place
    names; "*", the default, is any place of the cluster), and what it may do there
    (`may`: meet, move, cabinet, lazy, status; all of them by default), and the programs,
    besides its own, that the agents it starts elsewhere may run for its principal
    (`programs`: each a CODE folder's digest, in hex; "*": any). Its deadline is the meet's
    timeout, or a day."""

    places: tuple[str, ...] = ("*",)
    may: tuple[str, ...] = MAY_ALL
    programs: tuple[str, ...] = ()

    @classmethod
    def of(cls, places: Iterable[str] | None = None, may: Iterable[str] | None = None,
           programs: Iterable[str | bytes] | str | None = None) -> Terms:
        """Terms from what a caller gave (None: the default), checked. `programs`: the
        source of each program (str or bytes, a CODE folder's one element), or "*"."""
        if places is None and may is None and programs is None:
            return DEFAULT_TERMS  # every meet of a caller who says nothing: no work
        if isinstance(places, str) or isinstance(may, str):
            raise TypeError("places and may are lists of strings, not one string")
        if programs == "*":
            programs = ["*"]
        elif isinstance(programs, str | bytes):
            raise TypeError("programs is a list of programs (or \"*\"), not one program")
        digests = tuple(p if p == "*" else code_digest([p if isinstance(p, bytes)
                                                        else p.encode()]).hex()
                        for p in programs or ())
        chosen = tuple(places) if places is not None else ("*",)
        allowed = tuple(may) if may is not None else MAY_ALL
        if not chosen or not all(isinstance(p, str) and p for p in chosen):
            raise ValueError("a passport's places are non-empty patterns, at least one "
                             "('*': any place of the cluster)")
        unknown = [m for m in allowed if m not in MAY_ALL]
        if unknown:
            raise ValueError(f"a passport may allow {', '.join(MAY_ALL)}, not "
                             f"{', '.join(map(str, unknown))}")
        return cls(chosen, allowed, digests)


DEFAULT_TERMS = Terms()
#: Seconds a passport signed ahead waits for its launch (see Credentials.ahead), and
#: how long after a launch's answer it is signed (on a thread: the signature holds the GIL,
#: which the caller then has to take its answer and go on).
AHEAD_SECONDS = 10.0
AHEAD_PAUSE = 0.02
#: What a launch's passport depends on: (the place's address if it has an identity of its
#: own here, else ""; agent; program; timeout; terms).
_Launch = tuple[str, str, str, float | None, Terms]


def program_of(briefcase: Briefcase) -> str:
    """The digest, in hex, of the program a launch carries (its CODE folder, or the hash
    it is named by); "" for none."""
    if CODE in briefcase:
        return code_digest(briefcase[CODE]).hex()
    named = briefcase.get(CODE_HASH)
    return named[0].hex() if named else ""


def new_meet_id() -> str:
    """A fresh meet id for the client to choose (16 URL-safe characters, 96 random bits).

    Never one that starts with "-": a user types the id back on a command line
    (`tacoma status ID@PLACE`, `tacoma kill`), where it would read as an option."""
    while True:
        meet_id = secrets.token_urlsafe(12)
        if not meet_id.startswith("-"):
            return meet_id

log = logging.getLogger("tacoma.client")


class Credentials:
    """One way of authenticating to places: an identity (its TLS context), or plaintext."""

    def __init__(self, identity: str | Path | Bundle | None = None, *,
                 insecure: bool = False, trust_dir: Path | None = None) -> None:
        self.insecure = insecure
        self._spec = identity
        self._store = TrustStore(trust_dir)
        self._bundle: Bundle | None = identity if isinstance(identity, Bundle) else None
        self._context: ssl.SSLContext | None = None
        #: Contexts for particular places (the embedded place's), by address, and the
        #: identities they show (whose keys sign the passports of agents launched there).
        self.places: dict[str, ssl.SSLContext | None] = {}
        self.place_bundles: dict[str, Bundle] = {}
        #: Whether meets made with these credentials carry passports (a client's do; a
        #: place meets other places for itself, and hands on its agents' own passports).
        self.signs = True
        #: Signers by the address of a place with an identity of its own here ("": this
        #: identity's).
        self._signers: dict[str, Signer] = {}
        #: Passports signed ahead (see ahead), by (place, agent, program, timeout,
        #: terms): the meet id each names, its papers, and when it was signed (monotonic).
        self._ahead: dict[_Launch, tuple[str, bytes, float]] = {}
        #: Launches whose passport is being signed ahead now (see ahead).
        self._signing: set[_Launch] = set()

    def bundle(self) -> Bundle:
        """The identity file in use (TrustError if there is none)."""
        if self._bundle is None:
            spec = self._spec if self._spec is not None else os.environ.get(IDENTITY_ENV)
            if not spec:
                spec = self._store.default_identity()
                if spec is None:
                    raise TrustError(
                        f"no identity to meet places with: {self._store.root} has no default "
                        "identity (the first `tacoma place` of a user makes one; or run "
                        "tacoma trust init), and neither --identity nor $TACOMA_IDENTITY "
                        "names one")
            self._bundle = Bundle.read(self._store.find(str(spec)))
        return self._bundle

    def context(self, address: str) -> ssl.SSLContext | None:
        """The TLS context for connecting to `address`; None for plaintext."""
        if address in self.places:
            return self.places[address]
        if self.insecure:
            return None
        if self._context is None:
            self._context = client_context(self.bundle())
        return self._context

    def signs_for(self, agent: str) -> bool:
        """Whether a launch of `agent` with these credentials carries a passport."""
        return not self.insecure and self.signs and agent not in _NO_PASSPORT

    def launch_id(self, address: str, agent: str, program: str, timeout: float | None,
                  terms: Terms = DEFAULT_TERMS) -> str:
        """The meet id for launching `agent` with `program` (its digest, program_of) at the
        place at `address`: that of the passport signed ahead for it (see ahead) if
        one is ready, else a new one."""
        if self.signs_for(agent):
            ahead = self._ahead.get(self._launch(address, agent, program, timeout, terms))
            if ahead is not None and time.monotonic() - ahead[2] < AHEAD_SECONDS:
                return ahead[0]
        return new_meet_id()

    def papers(self, address: str, agent: str, program: str, meet_id: str,
               timeout: float | None, terms: Terms = DEFAULT_TERMS) -> bytes:
        """The papers (a Meet's, see trust._passport) that carry the passport for
        launching `agent` with `program` as meet `meet_id` at the place at `address`;
        b"" where none is needed: plaintext, a place's own agent, or credentials that do
        not sign. A passport signed ahead for it (see ahead) is used, else one is
        signed now."""
        if not self.signs_for(agent):
            return b""
        key = self._launch(address, agent, program, timeout, terms)
        ahead = self._ahead.pop(key, None)
        if ahead is not None and ahead[0] == meet_id and \
                time.monotonic() - ahead[2] < AHEAD_SECONDS:
            return ahead[1]
        return self._sign(key, meet_id, 0.0)

    def ahead(self, address: str, agent: str, program: str, timeout: float | None,
              terms: Terms = DEFAULT_TERMS) -> Callable[[], None] | None:
        """The work of signing ahead the passport of the next launch like this one (see
        _sign_ahead), for a thread; None where none is wanted: credentials that do not
        sign, one ready and fresh, or one being signed already.

        One at a time for each launch: launches faster than a thread signs after its pause
        (a few hundred a second) would otherwise each queue one more, and the queue would
        grow with every launch, each item a signature no launch takes."""
        if not self.signs_for(agent):
            return None
        key = self._launch(address, agent, program, timeout, terms)
        ready = self._ahead.get(key)
        if key in self._signing or (
                ready is not None and time.monotonic() - ready[2] < AHEAD_SECONDS / 2):
            return None
        self._signing.add(key)
        return functools.partial(self._sign_ahead, key)

    def _sign_ahead(self, key: _Launch) -> None:
        """Sign the passport of the next launch like `key` now, off its path.

        An ECDSA signature costs about 30 us with the CPU's caches warm, and ten times
        that after a pause (measured: 380 us between meets a third of a second apart),
        which a launch would wait for; signed right after a launch, the next one like it
        takes it ready (within AHEAD_SECONDS, its deadline as far ahead as if signed then).
        Runs on a thread (see PlaceClient.meet): dict and set updates are atomic."""
        try:
            if len(self._ahead) >= 64:
                self._ahead.clear()
            meet_id = new_meet_id()
            time.sleep(AHEAD_PAUSE)  # the GIL is its caller's meanwhile: it takes its answer
            try:
                papers = self._sign(key, meet_id, AHEAD_SECONDS)
            except Exception as exc:  # noqa: BLE001 - the launch signs its own, and says why
                log.debug("signing a passport ahead failed: %s", exc)
                return
            self._ahead[key] = (meet_id, papers, time.monotonic())
        finally:
            self._signing.discard(key)

    def _launch(self, address: str, agent: str, program: str, timeout: float | None,
                terms: Terms) -> _Launch:
        """What a launch's passport depends on; a place with an identity of its own here
        (the embedded place's) signs with that one."""
        return (address if address in self.place_bundles else "", agent, program, timeout,
                terms)

    def _sign(self, key: _Launch, meet_id: str, extra: float) -> bytes:
        from ..trust._passport import DEFAULT_SECONDS, Papers, Signer  # cryptography

        place, agent, program, timeout, terms = key
        signer = self._signers.get(place)
        if signer is None:
            signer = self._signers[place] = Signer(self.place_bundles[place] if place
                                                   else self.bundle())
        seconds = (timeout if timeout is not None else DEFAULT_SECONDS) + extra
        return Papers(signer.passport(
            agent=agent, programs=(program, *terms.programs), meet=meet_id,
            places=terms.places, deadline=time.time() + seconds, may=terms.may)).to_wire()

    @property
    def name(self) -> str:
        """The name in this identity's certificate (the principal places see)."""
        if self.insecure:
            return ""
        from ..trust._certs import read_certificate  # cryptography: only when asked

        return read_certificate(self.bundle().certificate).name


_credentials: Credentials | None = None


def credentials() -> Credentials:
    """This process's credentials (from the environment unless `use_identity` set them)."""
    global _credentials
    if _credentials is None:
        insecure = insecure_from_env()
        if insecure:
            log.warning("TACOMA_INSECURE is set: meeting places in plaintext, with no "
                        "authentication (for a closed test network only)")
        _credentials = Credentials(insecure=insecure)
    return _credentials


def use_identity(identity: str | Path | None = None, *, insecure: bool = False,
                 trust_dir: Path | None = None) -> None:
    """Meet places, from now on, as `identity` (a name in the trust directory, or an
    identity file), or the default identity if None; `insecure` speaks plaintext to places
    started with --insecure. Connections already open keep theirs."""
    global _credentials
    places = _credentials.places if _credentials is not None else {}
    bundles = _credentials.place_bundles if _credentials is not None else {}
    _credentials = Credentials(identity, insecure=insecure, trust_dir=trust_dir)
    _credentials.places.update(places)
    _credentials.place_bundles.update(bundles)


def register_place(address: str, context: ssl.SSLContext | None,
                   bundle: Bundle | None = None) -> None:
    """Reach the place at `address` with `context` (a place in this process), showing the
    identity `bundle`, which signs the passports of the agents launched there."""
    credentials().places[address] = context
    if bundle is not None:
        credentials().place_bundles[address] = bundle


def current_principal() -> str:
    """The principal places see this process as: its identity's name."""
    return credentials().name
