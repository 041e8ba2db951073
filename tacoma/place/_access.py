"""Who may connect to a place and what they may meet there.

The place's side of trust (tacoma.trust): it serves TLS with its identity, refuses peers
whose certificate is not its CA's, expired or on the deny list, and knows every meet's
principal: the name in the certificate of the client that launched it, or, for a meet a
place of the cluster forwards (an agent's meet, a moving agent), the principal that place
names for it. Then:

- authorization (`--allow PRINCIPAL:AGENT_PATTERN`, shell-style patterns, repeatable): if
  any rule is given, a meet is served only if a rule matches its principal and agent;
  without rules every identity of the cluster may meet every agent;
- fair shares: no principal may hold more than its share (`--share`, a quarter by default)
  of --max-connections connections, or of --max-meets running meets, so one identity, or
  one leaky client, cannot lock the others out.

A place's identity is its own `--identity`, or on loopback its user's local place identity
(made with the CA on the first start, as Dask does with temporary certificates). With
`--insecure` there is no TLS and nobody is authenticated: for a closed test network only.
"""

from __future__ import annotations

import collections
import fnmatch
import ipaddress
import logging
from dataclasses import dataclass
from pathlib import Path

from ..client._client import PlaceClient
from ..client._identity import Credentials
from ..client._transport import Channel
from ..trust._store import LOCAL_PLACE, Bundle, TrustStore, check_name
from ..trust._tls import DenyList, Peer, RateLimitedLog, ServerTLS
from ..wire._errors import NotAuthorized, TrustError
from ..wire._names import HOME_AGENT, LAZY_AGENT, TRIP_AGENT
from ._settings import PlaceSettings

__all__ = ["Access", "Principal"]

log = logging.getLogger("tacoma.place")


@dataclass(frozen=True, slots=True)
class Principal:
    """Whom one meet is for: `name` (a certificate's; "" if nobody is authenticated) and,
    if a place of the cluster handed it here, that place's name (`via`)."""

    name: str
    via: str = ""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def is_wildcard(host: str) -> bool:
    return host in ("", "0.0.0.0", "::", "[::]")  # noqa: S104 - asking, not binding


class Access:
    """The place's TLS, deny list, authorization rules and per-principal shares."""

    def __init__(self, settings: PlaceSettings, host: str) -> None:
        self.settings = settings
        self.rules = [tuple(rule.split(":", 1)) for rule in settings.allow]
        self.tls: ServerTLS | None = None
        self.name = ""  # the place's own identity's name
        self.connections: collections.Counter[str] = collections.Counter()
        #: Open connections of peers without an identity (an --insecure place: nobody is
        #: anyone there), by their host address: each source gets the share an identity
        #: gets elsewhere, so that one host's flood of idle connections leaves room.
        self.sources: collections.Counter[str] = collections.Counter()
        self.connection_share = max(1, int(settings.max_connections * settings.share))
        self.refusals = RateLimitedLog(log)
        #: What agents must never see: the trust directory, the place's identity file.
        self.secrets: list[Path] = [TrustStore(settings.trust_dir).root]
        if settings.insecure:
            log.warning("--insecure: TLS is off. Nobody who connects is authenticated and "
                        "briefcases cross the network in clear: anyone who can reach this "
                        "place can run code on it. For a closed test network only.")
            self.credentials = Credentials(insecure=True)
            return
        store = TrustStore(settings.trust_dir)
        bundle = self._identity(store, host)
        self.tls = ServerTLS(bundle, DenyList(settings.deny_list or store.revoked))
        if settings.deny_list is not None and not settings.deny_list.exists():
            log.warning("the deny list %s does not exist (yet): no certificate is revoked "
                        "until it does", settings.deny_list)
        self.tls.deny_list.refresh()
        # The place meets other places (agents' meets, moves, trips' ends) as itself.
        self.credentials = Credentials(bundle)

    def _identity(self, store: TrustStore, host: str) -> Bundle:
        from ..trust import _certs  # cryptography: a place reads its own certificate once

        spec = self.settings.identity
        if spec is None:
            if not is_loopback(host):
                dialled = "ADDRESS (each address clients dial)" if is_wildcard(host) else host
                raise TrustError(
                    f"a place listening on {host} (not loopback) needs an identity: make a CA "
                    f"and one for this place (tacoma trust init; tacoma trust issue NAME "
                    f"--place --address {dialled}) and start it with --identity NAME; or, on "
                    "a closed test network only, --insecure")
            if _certs.ensure_local(store):
                log.info("made the CA and the local identities in %s", store.root)
            spec = LOCAL_PLACE
        found = store.find(str(spec))
        self.secrets.append(Path(found).absolute())
        bundle = Bundle.read(found)
        info = _certs.read_certificate(bundle.certificate)
        if "place" not in info.roles:
            raise TrustError(f"identity {info.name} is not a place's (its roles: "
                             f"{', '.join(info.roles)}): issue one with tacoma trust issue "
                             "NAME --place")
        if info.expired:
            raise TrustError(f"identity {info.name} expired on {info.not_after:%Y-%m-%d}: "
                             "issue it again (tacoma trust issue)")
        if host and not is_wildcard(host) and not _names(host, info.addresses):
            raise TrustError(
                f"identity {info.name} names {', '.join(info.addresses) or 'no address'}, "
                f"not {host}: clients would refuse it. Issue it with --address {host}")
        self.name = info.name
        return bundle

    # -- connections
    def admit(self, channel: Channel) -> str:
        """Whether to serve a connection whose TLS handshake succeeded: "" to serve it,
        else why not (the peer hears it in a Bye)."""
        peer = channel.identity
        if self.tls is None or peer is None:
            source = channel.peer.rsplit(":", 1)[0]
            if self.sources[source] >= self.connection_share:
                return self._refuse(channel, f"{source} holds its share of "
                                             f"{self.connection_share} connections; close some")
            self.sources[source] += 1
            return ""
        if self.revoked(peer):
            return self._refuse(channel, f"identity {peer.name} (certificate {peer.serial}) "
                                         "is revoked", NotAuthorized.BYE_PREFIX)
        if self.connections[peer.name] >= self.connection_share:
            return self._refuse(channel, f"identity {peer.name} holds its share of "
                                         f"{self.connection_share} connections; close some")
        self.connections[peer.name] += 1
        log.info("connection from %s as %s (%s)", channel.peer, peer.name,
                 ", ".join(sorted(peer.roles)))
        return ""

    def closed(self, channel: Channel) -> None:
        """A connection `admit` let in ended."""
        peer = channel.identity
        if peer is None:
            source = channel.peer.rsplit(":", 1)[0]
            if self.sources[source] > 1:
                self.sources[source] -= 1
            else:
                self.sources.pop(source, None)
        if peer is not None and self.connections[peer.name] > 0:
            self.connections[peer.name] -= 1
            if not self.connections[peer.name]:
                del self.connections[peer.name]

    def _refuse(self, channel: Channel, why: str, prefix: str = "") -> str:
        self.refusals.log(channel.peer, why)
        return prefix + why

    def vet_place(self, client: PlaceClient) -> None:
        """NotAuthorized if the place `client` reached shows a revoked certificate: no
        meet, code or principal is handed to it."""
        peer = client.channel.identity if client.channel is not None else None
        if peer is not None and self.revoked(peer):
            self.refusals.log(client.address, f"place identity {peer.name} is revoked")
            raise NotAuthorized(f"place {client.address} shows identity {peer.name} "
                                f"(certificate {peer.serial}), which is revoked here")

    def revoked(self, peer: Peer) -> bool:
        """Whether the deny list names `peer`'s certificate (reread if it changed)."""
        return self.tls is not None and self.tls.deny_list.denies(peer)

    # -- meets
    def principal(self, peer: Peer | None, claimed: str) -> Principal:
        """Whom a meet from `peer` that names principal `claimed` is for: `claimed`, if
        `peer` is a place of the cluster forwarding it (a meet naming none is its peer's:
        the session knows that one)."""
        if peer is None or not peer.is_place:
            raise NotAuthorized(f"only a place of the cluster may make a meet for another "
                                f"principal ({claimed[:80]!r}); "
                                f"{peer.name if peer else 'this peer'} is not one")
        try:
            check_name(claimed)
        except TrustError:
            raise NotAuthorized(f"place {peer.name} names a principal that no identity can "
                                f"have: {claimed[:80]!r}") from None
        return Principal(claimed, peer.name)

    def may_move(self, peer: Peer | None) -> None:
        """NotAuthorized unless `peer` may hand this place a moving agent (a `go` meet):
        only a place of the cluster may (a trip's hop is admitted as the meet it goes on
        from, and its end is sent to the home it names)."""
        if self.tls is not None and (peer is None or not peer.is_place):
            raise NotAuthorized(f"only a place may move an agent here; "
                                f"{peer.name if peer else 'this peer'} is not one")

    def authorize(self, principal: Principal, agent: str, address: str,
                  peer: Peer | None = None, peer_address: str = "") -> None:
        """NotAuthorized unless `principal` may meet `agent` here (the --allow rules)."""
        if not self.rules:
            return
        if agent in (HOME_AGENT, TRIP_AGENT) and peer is not None and peer.is_place:
            return  # a trip's end reaches its home whatever the rules
        if agent == LAZY_AGENT:
            return  # lazy folders' data: each is its own principal's alone (see _lazy)
        name = principal.name
        for who, what in self.rules:
            if fnmatch.fnmatchcase(name, who) and fnmatch.fnmatchcase(agent, what):
                return
        self.refusals.log(peer_address or f"an agent of {name or 'anonymous'}",
                          f"{name or 'anonymous'}"
                          f"{f' (via {principal.via})' if principal.via else ''} may not "
                          f"meet {agent}")
        raise NotAuthorized(f"{name or 'an anonymous peer'} may not meet {agent} at place "
                            f"{address}", "its --allow rules do not let it")


def _names(host: str, addresses: tuple[str, ...]) -> bool:
    """Whether a certificate naming `addresses` serves `host` (as a TLS client checks)."""
    host = host.strip("[]").lower()
    for address in addresses:
        address = address.lower()
        if address == host:
            return True
        if address.startswith("*.") and host.endswith(address[1:]) and "." not in \
                host[:-len(address) + 1]:
            return True
    return False
