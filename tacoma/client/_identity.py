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

import logging
import os
import ssl
from pathlib import Path

from ..trust._store import IDENTITY_ENV, Bundle, TrustStore, insecure_from_env
from ..trust._tls import client_context
from ..wire._errors import TrustError

__all__ = ["Credentials", "credentials", "current_principal", "register_place",
           "use_identity"]

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
        #: Contexts for particular places (the embedded place's), by address.
        self.places: dict[str, ssl.SSLContext | None] = {}

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
    _credentials = Credentials(identity, insecure=insecure, trust_dir=trust_dir)
    _credentials.places.update(places)


def register_place(address: str, context: ssl.SSLContext | None) -> None:
    """Reach the place at `address` with `context` (a place in this process)."""
    credentials().places[address] = context


def current_principal() -> str:
    """The principal places see this process as: its identity's name."""
    return credentials().name
