"""Who may connect to a place and what they may meet there.

The place's side of trust (tacoma.trust): it serves TLS with its identity, refuses peers
whose certificate is not its CA's, expired or on the deny list, and knows every meet's
principal: the name in the certificate of the client that launched it, or, for a meet a
place of the cluster forwards (an agent's meet, a moving agent), the principal that place
names for it, under that principal's passport (see _passports: a place never vouches for
a principal, it carries the principal's signed word). Then:

- who may meet what, in one table (`DOORS`): each of the place's own agents says from which
  side it may be met (a client, another place of the cluster, an agent at this place) and
  whether the --allow rules hold for it; every other agent may be met from every side;
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
import enum
import fnmatch
import ipaddress
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ...client._client import PlaceClient
from ...client._identity import Credentials
from ...transport import Channel
from ...trust._store import LOCAL_PLACE, Bundle, TrustStore, check_name
from ...trust._tls import DenyList, Peer, RateLimitedLog, ServerTLS
from ...wire._errors import NotAllowed, NotAuthorized, TrustError
from ...wire._names import (
    ADMIN_AGENT,
    CABINET_AGENT,
    ECHO_AGENT,
    HOME_AGENT,
    LAZY_AGENT,
    MAILBOX_AGENT,
    STATUS_AGENT,
    TRIP_AGENT,
)
from ...wire._text import shown
from .._settings import PlaceSettings
from ._passports import Passports, Principal

if TYPE_CHECKING:
    from ...trust._seal import Seals

__all__ = ["DOORS", "Access", "Door", "Principal", "Rules", "Side"]

log = logging.getLogger("tacoma.place")


class Side(enum.StrEnum):
    """Where a meet comes from."""

    CLIENT = "client"  # a program that is not a place: `tacoma meet`, tacoma.meet
    PLACE = "place"  # another place of the cluster, for itself or for one of its agents
    AGENT = "agent"  # an agent at this place, over its worker's channel
    #: A peer of an --insecure place, where nobody is authenticated: a client or a place,
    #: who can tell. It may meet what either may.
    ANYONE = "anyone"


class Rules(enum.Enum):
    """How the --allow rules hold for a meet of an agent."""

    AGENT = "agent"  # a rule must match the principal and this agent
    PRINCIPAL = "principal"  # a rule must name the principal (for any agent): a user here
    NONE = "none"  # the places' own business: no rule names it


@dataclass(frozen=True, slots=True)
class Door:
    """Who may meet one agent: from which sides, and how the --allow rules hold."""

    sides: frozenset[Side]
    rules: Rules = Rules.AGENT


_EVERY_SIDE = frozenset({Side.CLIENT, Side.PLACE, Side.AGENT})
#: The place's own agents' doors; every other agent (an interpreter's, an installed or a
#: trusted one, a resident) has `ANY_DOOR`. A trip's end and a rear guard's questions come
#: from places only (a client that could meet ag_home would end another principal's trip
#: with a forged result); the administrator is a person, with a client; the mailbox is an
#: agent's own, over its channel; lazy folders' data is read by any user of the place
#: (each folder is its own principal's alone: see _lazy).
DOORS: Mapping[str, Door] = {
    ECHO_AGENT: Door(_EVERY_SIDE),
    CABINET_AGENT: Door(_EVERY_SIDE),
    STATUS_AGENT: Door(_EVERY_SIDE),
    LAZY_AGENT: Door(_EVERY_SIDE, Rules.PRINCIPAL),
    ADMIN_AGENT: Door(frozenset({Side.CLIENT})),
    HOME_AGENT: Door(frozenset({Side.PLACE}), Rules.NONE),
    TRIP_AGENT: Door(frozenset({Side.PLACE}), Rules.NONE),
    MAILBOX_AGENT: Door(frozenset({Side.AGENT}), Rules.NONE),
}
ANY_DOOR = Door(_EVERY_SIDE)
_SAID = {Side.CLIENT: "clients", Side.PLACE: "places of the cluster",
         Side.AGENT: "agents at the place", Side.ANYONE: "unauthenticated peers"}
#: The sides an unauthenticated peer may be.
_PEERS = frozenset({Side.CLIENT, Side.PLACE})


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
        self.hosts: tuple[str, ...] = ()  # the addresses its certificate names
        self.connections: collections.Counter[str] = collections.Counter()
        #: Open connections of peers without an identity (an --insecure place: nobody is
        #: anyone there), by their host address: each source gets the share an identity
        #: gets elsewhere, so that one host's flood of idle connections leaves room.
        self.sources: collections.Counter[str] = collections.Counter()
        self.connection_share = max(1, int(settings.max_connections * settings.share))
        self.refusals = RateLimitedLog(log)
        #: Names on the deny list that a certificate not on it has shown since (see stops),
        #: as of the deny list's version then: a new revocation clears them.
        self.reissued: set[str] = set()
        self._reissued_of = 0
        #: What agents must never see: the trust directory, the place's identity file.
        self.secrets: list[Path] = [TrustStore(settings.trust_dir).root]
        if settings.insecure:
            log.warning("--insecure: TLS is off. Nobody who connects is authenticated and "
                        "briefcases cross the network in clear: anyone who can reach this "
                        "place can run code on it. For a closed test network only.")
            self.credentials = Credentials(insecure=True)
            self.seals: Seals | None = None
            self.passports = Passports("", "", None, None, self.refusals)
            return
        store = TrustStore(settings.trust_dir)
        bundle = self._identity(store, host)
        # Handshakes: a quarter of a principal's share of connections from one host, and
        # half the connections in all (see ServerTLS).
        self.tls = ServerTLS(bundle, DenyList(settings.deny_list or store.revoked),
                             per_source=max(2, self.connection_share // 4),
                             most=max(1, settings.max_connections // 2),
                             timeout=settings.handshake_seconds)
        if settings.deny_list is not None and not settings.deny_list.exists():
            log.warning("the deny list %s does not exist (yet): no certificate is revoked "
                        "until it does", settings.deny_list)
        self.tls.deny_list.refresh()
        # The place meets other places (agents' meets, moves, trips' ends) as itself, and
        # seals what only it may say (its lazy folders' references).
        self.credentials = Credentials(bundle)
        self.credentials.signs = False  # it hands on its agents' passports, never its own
        from ...trust._passport import Verifier  # cryptography, as for the identity above
        from ...trust._seal import Seals

        self.seals = Seals(bundle, self.tls.deny_list)
        self.passports = Passports("", self.name,
                                   Verifier(bundle.ca, self.tls.deny_list,
                                            self.seals.issued), self.seals,
                                   self.refusals, self.hosts)

    def _identity(self, store: TrustStore, host: str) -> Bundle:
        from ...trust import _certs  # cryptography: a place reads its own certificate once

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
        self.hosts = info.addresses
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
        if peer.name in self.tls.deny_list.principals:
            # Issued again after it was revoked: the name is someone's again (see stops).
            self._fresh_reissued()
            self.reissued.add(peer.name)
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

    def stops(self, principal: str, serial: str = "") -> bool:
        """Whether meets of `principal` must stop: the certificate that launched them
        (`serial`, if this place saw it) is revoked; or, for meets another place handed
        here, every certificate of that name is (it is on the deny list, and no certificate
        of it that is not has shown itself here since). As of the deny list last read: the
        meet path does not stat it (the place rereads it every few seconds)."""
        if self.tls is None:
            return False
        denied = self.tls.deny_list
        if serial:
            return serial in denied.serials
        self._fresh_reissued()
        return principal in denied.principals and principal not in self.reissued

    def _fresh_reissued(self) -> None:
        """Forget which revoked names were issued again once the deny list changes: a name
        revoked again must show a certificate not on the list again."""
        assert self.tls is not None
        if self._reissued_of != self.tls.deny_list.version:
            self._reissued_of = self.tls.deny_list.version
            self.reissued.clear()

    # -- meets
    def principal(self, peer: Peer | None, claimed: str, papers: bytes,
                  peer_address: str, agent: str = "") -> Principal:
        """Whom a meet from `peer` that names principal `claimed` is for: `claimed`, if
        `peer` is a place of the cluster forwarding it with `claimed`'s passport (in
        `papers`; a meet naming none is its peer's: the session knows that one)."""
        if peer is None or not peer.is_place:
            raise NotAuthorized(f"only a place of the cluster may make a meet for another "
                                f"principal ({claimed[:80]!r}); "
                                f"{peer.name if peer else 'this peer'} is not one")
        try:
            check_name(claimed)
        except TrustError:
            raise NotAuthorized(f"place {peer.name} names a principal that no identity can "
                                f"have: {claimed[:80]!r}") from None
        return self.passports.forwarded(peer, claimed, papers, peer_address, agent)

    def side(self, peer: Peer | None) -> Side:
        """Which side a connection's meets come from: a place, if its certificate is a
        place's, else a client; anyone on an --insecure place, where nobody is
        authenticated."""
        if self.tls is None:
            return Side.ANYONE
        return Side.PLACE if peer is not None and peer.is_place else Side.CLIENT

    def check_onward(self, agent: str) -> None:
        """NotAllowed unless an agent here may meet `agent` at another place. Its place
        forwards the meet, so the other place sees a place: what only places meet for
        themselves (a trip's end, a rear guard's questions) no agent may meet anywhere."""
        door = DOORS.get(agent, ANY_DOOR)
        if not door.sides & {Side.CLIENT, Side.AGENT}:
            raise NotAllowed(f"{agent} is met by places for themselves, not by agents")

    def check(self, principal: Principal, agent: str, mode: str, side: Side,
              address: str, peer_address: str = "") -> None:
        """NotAllowed or NotAuthorized unless `principal` may meet `agent` here in `mode`,
        from `side` (the table of doors, then the --allow rules): every meet a place
        serves, from a client, a place or an agent here, is checked here once."""
        if principal.via and self.stops(principal.name):
            raise NotAuthorized(f"{principal.name} is revoked here: place {principal.via} may "
                                "not meet for it")
        door = DOORS.get(agent, ANY_DOOR)
        if side not in door.sides and not (side is Side.ANYONE and door.sides & _PEERS):
            said = " and ".join(_SAID[s] for s in Side if s in door.sides)
            raise NotAllowed(f"{agent} is met by {said} only, not by {_SAID[side]}")
        if mode == "go" and side not in (Side.PLACE, Side.ANYONE):
            raise NotAuthorized("only a place may move an agent here; this peer is not one")
        self.passports.check(principal, agent, mode)
        if not self.rules or door.rules is Rules.NONE:
            return
        name = principal.name
        for who, what in self.rules:
            if fnmatch.fnmatchcase(name, who) and (door.rules is Rules.PRINCIPAL
                                                   or fnmatch.fnmatchcase(agent, what)):
                return
        self.refusals.log(peer_address or f"an agent of {shown(name or 'anonymous', 80)}",
                          f"{shown(name or 'anonymous', 80)}"
                          f"{f' (via {shown(principal.via, 80)})' if principal.via else ''} "
                          f"may not meet {shown(agent, 80)}")
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
