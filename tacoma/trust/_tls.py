"""Mutual TLS 1.3 for tacoma's connections: contexts, the peer's identity, the deny list.

Every connection between a client and a place, and between places, is TLS 1.3 with a
certificate on both sides, signed by the cluster's CA (standard library `ssl`). The place
learns its peer's name and roles from the peer's certificate (`Peer`); the client checks
that the place's certificate names the address it dialled and says it is a place.

The place wraps each accepted connection itself (`ServerTLS.wrap`) instead of passing `ssl=`
to create_server: that way it hears of every refused handshake (wrong CA, expired, no
certificate, a stall past the handshake timeout, plaintext) with the peer's address, and
logs it, once per peer and reason in a while. asyncio would drop those silently.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from ..wire._errors import TrustError
from ..wire._protocol import HANDSHAKE_TIMEOUT
from ..wire._text import escape
from ._store import Bundle, parse_serials, serial_text

__all__ = ["DenyList", "Peer", "RateLimitedLog", "ServerTLS",
           "client_context",
           "peer_of", "server_context"]

log = logging.getLogger("tacoma.place")



def _context(bundle: Bundle, purpose: int) -> ssl.SSLContext:
    context = ssl.SSLContext(purpose)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    try:
        context.load_cert_chain(bundle.path)
        context.load_verify_locations(cadata=bundle.ca.decode("ascii"))
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise TrustError(f"cannot use identity file {bundle.path}: {exc}") from None
    context.verify_mode = ssl.CERT_REQUIRED
    return context


def server_context(bundle: Bundle) -> ssl.SSLContext:
    """A place's context: TLS 1.3 only, a client certificate from the CA required.

    No session tickets: a connection is authenticated by its own full handshake, never by
    resuming an earlier one (and a place's connections are long-lived anyway).
    """
    context = _context(bundle, ssl.PROTOCOL_TLS_SERVER)
    context.options |= ssl.OP_NO_TICKET
    context.num_tickets = 0
    return context


def client_context(bundle: Bundle) -> ssl.SSLContext:
    """A client's (or a place's outgoing) context: TLS 1.3 only, the place's certificate
    from the CA and naming the address dialled, as any TLS client checks a host name."""
    context = _context(bundle, ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = True
    return context


@dataclass(frozen=True, slots=True)
class Peer:
    """Who is at the other end of a connection, as its certificate says."""

    name: str
    roles: frozenset[str]
    serial: str

    @property
    def is_place(self) -> bool:
        return "place" in self.roles

    @property
    def is_admin(self) -> bool:
        return "admin" in self.roles


def peer_of(transport: asyncio.BaseTransport) -> Peer | None:
    """The peer of a TLS transport (None for a plaintext one)."""
    cert: Any = transport.get_extra_info("peercert")
    if not cert:
        return None
    name, roles = "", set()
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                name = value
            elif key == "organizationalUnitName":
                roles.add(value)
    return Peer(name, frozenset(roles), serial_text(str(cert.get("serialNumber", ""))))


class DenyList:
    """The revoked serial numbers (`tacoma trust revoke` writes the file), reread when the
    file changes: a stat per check, the file read only when its mtime or size moved."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen: tuple[int, int] | None = None
        self.serials: frozenset[str] = frozenset()
        self.names: dict[str, str] = {}  # the name each revoked serial was issued to
        self.principals: frozenset[str] = frozenset()  # those names
        self.version = 0  # counts the rereads that changed it

    def refresh(self) -> bool:
        """Reread the file if it changed; True if it did. A file that cannot be read or
        parsed keeps the serials read before (and is tried again at the next check): a
        broken deny list must not let a revoked certificate back in."""
        try:
            st = os.stat(self.path)
            seen = (st.st_mtime_ns, st.st_size)
        except OSError:
            seen = None
        if seen == self._seen:
            return False
        names: dict[str, str] = {}
        if seen is not None:
            try:
                names = parse_serials(self.path.read_text(errors="replace"))
            except OSError as exc:
                log.error("cannot read the deny list %s: %s", self.path, exc)
                return False
        elif self.serials:
            log.error("the deny list %s is gone: keeping the %d revoked certificates read "
                      "before", self.path, len(self.serials))
            self._seen = seen
            return False
        self._seen = seen
        self.names = names
        self.serials = frozenset(names)
        self.principals = frozenset(names.values())
        self.version += 1
        return True

    def denies(self, peer: Peer) -> bool:
        self.refresh()
        return peer.serial in self.serials


class RateLimitedLog:
    """Logs a refusal once per (host, reason) per minute, and at most BURST lines per host
    per minute whatever the reasons, so that a peer retrying in a loop, or varying what it
    asks for (a new agent name each time), cannot fill the log; `count` counts them all. A
    reason is cut to one bounded line."""

    WINDOW = 60.0
    BURST = 5
    KEEP = 1024
    REASON = 400  # characters of one reason logged

    def __init__(self, logger: logging.Logger = log) -> None:
        self._log = logger
        #: By host: when its window began, lines logged in it, refusals not logged, and
        #: the reasons logged in it.
        self._hosts: dict[str, tuple[float, int, int, set[str]]] = {}
        self.count = 0

    def log(self, address: str, reason: str) -> None:
        """Log that `address` (HOST:PORT, or who else was refused) was refused for `reason`,
        unless that host was refused for it within the window (a retrying peer comes from a
        new port each time) or had its BURST lines in it; say how many were not logged when
        the host is next logged."""
        self.count += 1
        now = time.monotonic()
        key = address.rpartition(":")[0] or address
        if len(reason) > self.REASON:
            reason = f"{reason[:self.REASON]}... ({len(reason):,} characters)"
        began, logged, dropped, reasons = self._hosts.get(key, (-self.WINDOW, 0, 0, set()))
        if now - began >= self.WINDOW:
            began, logged, reasons = now, 0, set()
        elif logged >= self.BURST or reason in reasons:
            self._hosts[key] = (began, logged, dropped + 1, reasons)
            return
        if key not in self._hosts and len(self._hosts) >= self.KEEP:
            # Forget what is past its window, then the oldest.
            self._hosts = {k: v for k, v in self._hosts.items() if now - v[0] < self.WINDOW}
            while len(self._hosts) >= self.KEEP:
                del self._hosts[next(iter(self._hosts))]
        reasons.add(reason)
        self._hosts[key] = (began, logged + 1, 0, reasons)
        more = f" (and {dropped} more refusals of it not logged)" if dropped else ""
        self._log.warning("refused %s: %s%s", escape(address[:self.REASON]), escape(reason),
                          more)


def _ssl_protocol_class(loop: asyncio.AbstractEventLoop) -> type[Any]:
    """The loop's own TLS protocol: uvloop's (Cython) on uvloop, asyncio's otherwise."""
    import uvloop
    import uvloop.loop

    if isinstance(loop, uvloop.Loop):
        protocol: type[Any] = uvloop.loop.SSLProtocol  # type: ignore[attr-defined]
        return protocol
    from asyncio.sslproto import SSLProtocol
    return SSLProtocol


class ServerTLS:
    """The place's side: wraps each accepted connection's protocol in TLS.

    A handshake costs the place a descriptor and a slot before it knows who the peer is,
    so handshakes are bounded twice: `per_source` at once from one host (one host's flood
    cannot take them all), and `most` at once in all (below the place's connections, so
    that authenticated peers always find room). Past either bound the oldest handshake of
    that host (or of all) is dropped to make room for the new one, as a SYN cache drops its
    oldest: a flood of connections that never finish their handshakes then holds the
    place's slots only until newer ones come, and a real peer, whose handshake takes a few
    milliseconds, gets through unless the flood replaces the whole bound within them.
    """

    def __init__(self, bundle: Bundle, deny_list: DenyList, per_source: int = 64,
                 most: int = 512, timeout: float = HANDSHAKE_TIMEOUT) -> None:
        self.bundle = bundle
        self.timeout = timeout  # seconds a peer has to finish its handshake
        self.context = server_context(bundle)
        self.deny_list = deny_list
        self.refusals = RateLimitedLog()
        self.handshaking = 0  # connections accepted whose handshake is not over
        self.per_source = per_source
        self.most = most
        #: Handshakes under way, oldest first: in all, and by the peer's host.
        self._all: dict[Any, tuple[str, asyncio.Transport]] = {}
        self._by_host: dict[str, dict[Any, asyncio.Transport]] = {}
        self._protocol: type[Any] | None = None

    def sources(self, host: str) -> int:
        """Handshakes under way from `host`."""
        return len(self._by_host.get(host, ()))

    def _start(self, gate: Any, host: str, transport: asyncio.Transport) -> None:
        """Count `gate`'s handshake, dropping the oldest past a bound (see the class)."""
        mine = self._by_host.setdefault(host, {})
        if len(mine) >= self.per_source:
            self._drop(next(iter(mine)), f"{host} has {self.per_source} TLS handshakes under "
                                         "way: its oldest is dropped")
        elif len(self._all) >= self.most:
            self._drop(next(iter(self._all)), f"{self.most} TLS handshakes are under way: "
                                              "the oldest is dropped")
        mine[gate] = transport
        self._all[gate] = (host, transport)

    def _drop(self, gate: Any, why: str) -> None:
        _, transport = self._all[gate]
        self._done(gate)
        gate.refused = True  # its failed handshake is not logged again
        self.refusals.log(gate.peer, why)
        transport.abort()

    def _done(self, gate: Any) -> None:
        entry = self._all.pop(gate, None)
        if entry is None:
            return
        mine = self._by_host.get(entry[0])
        if mine is not None:
            mine.pop(gate, None)
            if not mine:
                del self._by_host[entry[0]]

    def wrap(self, app: asyncio.Protocol) -> tuple[asyncio.BaseProtocol, Callable[[], None]]:
        """The protocol to give the server for one new connection: TLS around `app`, whose
        connection_made runs once the peer's certificate is verified. A refused handshake
        is logged with the peer's address.

        Also returns `finished`, to call from `app`'s connection_made: the connection stops
        counting as handshaking there and then (the TLS layer says so only a loop
        iteration later, when the place may already count it as a session).
        """
        loop = asyncio.get_running_loop()
        if self._protocol is None:
            base = _ssl_protocol_class(loop)
            tls = self

            class Gate(base):  # type: ignore[misc, valid-type]
                """Notes the peer's address, which the TLS layer does not keep, and counts
                its handshake against the bounds (see ServerTLS)."""

                peer = "?"
                refused = False

                def connection_made(self, transport: asyncio.BaseTransport) -> None:
                    peer = transport.get_extra_info("peername")
                    host = "?"
                    if isinstance(peer, tuple):
                        host = str(peer[0])
                        self.peer = f"{host}:{peer[1]}"
                    tls._start(self, host, cast(asyncio.Transport, transport))
                    super().connection_made(transport)

            self._protocol = Gate
        waiter: asyncio.Future[None] = loop.create_future()
        gate = self._protocol(loop, app, self.context, waiter, server_side=True,
                              ssl_handshake_timeout=self.timeout)
        self.handshaking += 1
        counted = True

        def finished() -> None:
            nonlocal counted
            if counted:
                counted = False
                self.handshaking -= 1
                self._done(gate)

        def handshake_over(future: asyncio.Future[None]) -> None:
            finished()
            if future.cancelled() or gate.refused:
                return
            exc = future.exception()
            if exc is not None:
                self.refusals.log(gate.peer, _why(exc, self.timeout))

        waiter.add_done_callback(handshake_over)
        return gate, finished


def _why(exc: BaseException, timeout: float) -> str:
    """A refused handshake's reason in a line."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"TLS: its certificate is not trusted ({exc.verify_message})"
    if isinstance(exc, ssl.SSLError):
        reason = exc.reason or str(exc)
        if reason == "PEER_DID_NOT_RETURN_A_CERTIFICATE":
            return "TLS: it showed no certificate"
        if reason in ("HTTP_REQUEST", "WRONG_VERSION_NUMBER", "UNSUPPORTED_PROTOCOL",
                      "UNEXPECTED_MESSAGE", "PACKET_LENGTH_TOO_LONG", "RECORD_LAYER_FAILURE"):
            return f"TLS: it does not speak TLS 1.3 ({reason}; a plaintext client?)"
        return f"TLS: {reason}"
    if isinstance(exc, ConnectionAbortedError):
        return f"TLS: no handshake within {timeout:g} s"
    if isinstance(exc, ConnectionResetError | BrokenPipeError):
        return ("TLS: the peer broke off the handshake (does it trust this place's "
                "certificate? a client of another cluster does not)")
    return f"TLS handshake failed: {type(exc).__name__}: {exc}".rstrip(": ")
