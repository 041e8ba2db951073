"""Passports at a place: whom a meet is for when a place names a principal not its own.

What a passport and a hop line are is trust._passport's. A place:

- at a client's launch (the client is the principal; its connection proved it): reads the
  passport the client signed and checks that it is this meet's (principal, meet id, agent
  and, once the program is unpacked, its hash); its signature is not checked here, where
  nobody relies on it, but by every other place the agent reaches;
- for a meet another place names a principal for: takes it only under a valid passport of
  that principal (signed by a current, unrevoked certificate of this cluster's CA with that
  name), whose itinerary admits this place and whose deadline has not passed, which lets
  the agent do what the meet does (`MAY`: meet, move, cabinet, lazy, status), and whose
  program is the one the meet carries; anything less is NotAuthorized, saying what is
  missing, and logged with the place that tried;
- hands the passport on with every meet its agents make elsewhere and every hop: a place
  never vouches for a principal, it only carries that principal's word;
- signs a line for each hand-over (`line`), and checks those a hop arrives with: its home
  is the place that signed the first line (so a made-up HOME makes no connection), and the
  last is the sending place's own; the home checks them all when the trip ends (`path`).

A meet without a passport is its peer's own: a place forwarding it meets as itself.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...trust._passport import Line, Papers, Passport, PathStep, Verifier, briefcase_digest
from ...trust._tls import Peer, RateLimitedLog
from ...wire._address import canonical_address, parse_address
from ...wire._briefcase import CODE, Briefcase
from ...wire._errors import NotAuthorized, TrustError
from ...wire._names import (
    CABINET_AGENT,
    ECHO_AGENT,
    HOME_AGENT,
    LAZY_AGENT,
    MAILBOX_AGENT,
    STATUS_AGENT,
)
from ...wire._program import code_digest
from ...wire._text import shown
from ._trips import Trip

if TYPE_CHECKING:
    from ...trust._seal import Seals
    from ...wire._protocol import Meet

__all__ = ["Carried", "Passports", "Principal"]

log = logging.getLogger("tacoma.place")

#: What each of the place's own agents does for a principal (trust._passport.MAY); any
#: other agent is met ("meet"), and a hop moves ("move"). ag_echo does nothing for anyone;
#: a trip's end (ag_home) is checked against the trip's own passport.
_DOES = {STATUS_AGENT: "status", CABINET_AGENT: "cabinet", LAZY_AGENT: "lazy",
         ECHO_AGENT: "", HOME_AGENT: "", MAILBOX_AGENT: ""}


@dataclass(frozen=True, slots=True)
class Principal:
    """Whom one meet is for: `name` (a certificate's; "" if nobody is authenticated) and,
    if a place of the cluster handed it here, that place's name (`via`); the agent's
    passport, if it has one, the lines of the places that handed it on, and the serial of
    the certificate that signed the passport."""

    name: str
    via: str = ""
    passport: Passport | None = None
    lines: tuple[bytes, ...] = ()
    serial: str = ""


#: The note of a line signed for another trip or passport than the one it comes with.
_FOREIGN = "this line is for another trip or passport"


class Passports:
    """The passports of the meets one place takes, and the lines it signs."""

    def __init__(self, address: str, name: str, verifier: Verifier | None,
                 seals: Seals | None, refusals: RateLimitedLog,
                 hosts: tuple[str, ...] = ()) -> None:
        self.address = address  # see here
        #: Every address this place is known by (its own, and on a wildcard listen those
        #: its certificate names, with its port).
        self.addresses: frozenset[str] = frozenset({address})
        self.hosts = hosts  # the addresses its certificate names
        self.name = name  # the place's own identity's
        self.verifier = verifier  # None: an --insecure place, where nobody is anybody
        self.seals = seals
        self.refusals = refusals

    def here(self, address: str) -> None:
        """The place listens at `address` (known once it is bound)."""
        self.address = address
        host, port = parse_address(address)
        known = {address}
        if host in ("0.0.0.0", "::"):  # noqa: S104 - asking, not binding
            known.update(canonical_address(f"{h}:{port}") for h in self.hosts)
        self.addresses = frozenset(known)

    # -- taking meets
    def own(self, own: Principal, raw: bytes, event: Meet, client: bool) -> Principal:
        """The principal of a meet that carries papers and is its peer's own: a client's
        launch, with its passport if the passport is this meet's (NotAuthorized
        otherwise); a place's hop of its own agent (no passport), with its lines."""
        if self.verifier is None:  # an --insecure place: nobody is anybody, nothing signed
            return own
        papers = Papers.read(raw)
        if not papers.passport:
            if client:
                raise NotAuthorized("a client's meet carries a passport only (hop lines are "
                                    "places' business)")
            return dataclasses.replace(own, lines=papers.lines)
        if papers.lines:
            raise NotAuthorized("a meet that is its peer's own carries no hop lines with "
                                "a passport: a place names the passport's principal")
        passport = Passport.read(papers.passport)
        if passport.principal != own.name:
            raise NotAuthorized(f"the passport is {shown(passport.principal, 80)}'s, and "
                                f"this client is {own.name or 'anonymous'}")
        if passport.meet != event.meet_id or passport.agent != event.agent:
            raise NotAuthorized(f"the passport is for meet {shown(passport.meet, 80)} of "
                                f"{shown(passport.agent, 80)}, not this one")
        return dataclasses.replace(own, passport=passport)

    def forwarded(self, peer: Peer, claimed: str, raw: bytes, via: str,
                  agent: str = "") -> Principal:
        """The principal of a meet place `peer` names `claimed` for: under its passport
        (NotAuthorized, logged, if there is none or it does not hold here). A trip's end
        (`agent` ag_home) comes home whatever the passport's places and deadline: it is
        checked against the trip's own passport and lines (see BuiltIns.trip_ended)."""
        try:
            papers = Papers.read(raw)
            if not papers.passport:
                raise NotAuthorized(f"place {peer.name} names principal {shown(claimed, 80)} "
                                    f"without a passport: a place acts for a principal only "
                                    f"with the passport that principal signed for its agent")
            assert self.verifier is not None  # no place names a principal to an --insecure one
            passport, serial = self.verifier.verify(papers.passport)
            if passport.principal != claimed:
                raise NotAuthorized(f"place {peer.name} names principal "
                                    f"{shown(claimed, 80)} with a passport of "
                                    f"{shown(passport.principal, 80)}'s")
            if agent != HOME_AGENT:
                passport.check_at(self.addresses, self.name)
        except NotAuthorized as exc:
            self.refusals.log(via, f"place {peer.name} tried to act for "
                                   f"{shown(claimed, 80)}: {exc.message}")
            raise
        return Principal(claimed, peer.name, passport, papers.lines, serial)

    def check(self, principal: Principal, agent: str, mode: str) -> None:
        """NotAuthorized unless the passport of a meet another place made for `principal`
        (or an agent another place handed here makes) lets its agent do what meeting
        `agent` in `mode` does."""
        passport = principal.passport
        if passport is None or not principal.via:
            return
        does = "move" if mode == "go" else _DOES.get(agent, "meet")
        if does:
            try:
                passport.allows(does)
            except NotAuthorized as exc:
                self._refused(principal, exc)
                raise

    def check_program(self, principal: Principal, agent: str, briefcase: Briefcase) -> None:
        """NotAuthorized unless the program a meet carries to its interpreter (`agent`) is
        its passport's: a passport runs its own program, and no other, for its principal."""
        passport = principal.passport
        if passport is None or CODE not in briefcase:
            return
        program = code_digest(briefcase[CODE]).hex()
        if not passport.runs(program):
            named = ", ".join(p[:16] for p in passport.programs if p) or "none"
            refused = NotAuthorized(
                f"the passport of {passport.principal} lets its own program run for it, "
                f"and those its launcher named ({named}); "
                f"this meet carries another ({program[:16]}, for {agent}): an agent starts "
                "another program elsewhere as its principal only if its launcher named it "
                "(tacoma meet --program FILE; programs= in Python)")
            self._refused(principal, refused)
            raise refused

    def _refused(self, principal: Principal, exc: NotAuthorized) -> None:
        """Log a refusal of a meet another place made under a passport (rate-limited)."""
        if principal.via:
            self.refusals.log(principal.via, f"place {principal.via} tried to act for "
                                             f"{shown(principal.name, 80)}: {exc.message}")

    # -- hops
    def arrived(self, principal: Principal, trip: Trip, briefcase: Briefcase,
                sender: str) -> tuple[Trip, str]:
        """Check the lines a hop arrived with (`principal.lines`): its HOME is the place that
        signed the first, the last is its sender's (the place named `sender`) and hands
        `briefcase` to this place. The trip, with its deadline no later than its
        passport's, and the briefcase's digest (this place's next line names it)."""
        if self.seals is None:  # an --insecure place: nobody signs anything
            return trip, ""
        lines = principal.lines
        if not lines:
            raise NotAuthorized("a moving agent arrives with its home's line: this one has "
                                "none")
        first, first_place = self._checked(lines[0])
        last, last_place = self._checked(lines[-1]) if len(lines) > 1 else (first, first_place)
        digest = principal.passport.digest if principal.passport is not None else ""
        if first.trip != trip.id or first.came != trip.home or first.passport != digest:
            raise NotAuthorized(f"the home of trip {shown(trip.id, 40)} ({shown(trip.home, 80)})"
                                " did not sign its first line")
        # Not checked: that `last.went` is this place's address. The agent was handed to
        # the address its sender dialled, which may be a proxy's, a name, or a wildcard's;
        # and only its sender can present the line (below).
        if last.trip != trip.id or last.passport != digest or last.hop != trip.hop:
            raise NotAuthorized("the last line of a moving agent is not for this hop here")
        if last_place != sender:
            raise NotAuthorized(f"the last line is {shown(last_place, 80)}'s, and place "
                                f"{shown(sender, 80)} handed the agent over")
        got = briefcase_digest(briefcase)
        if last.sent != got:
            raise NotAuthorized(f"place {shown(sender, 80)} handed over another briefcase "
                                "than it signed for")
        passport = principal.passport
        if passport is not None and (not trip.deadline or trip.deadline > passport.deadline):
            trip = dataclasses.replace(trip, deadline=passport.deadline)
        # The rear guard this place answers is the place that signed the last line (HOME's
        # own guard field is the sender's word only: trusted, it could name any address).
        return dataclasses.replace(trip, guard=last.came), got

    def _checked(self, raw: bytes) -> tuple[Line, str]:
        assert self.seals is not None
        line, statement, seal = Line.read(raw)
        try:
            host = parse_address(line.came)[0]
            place = self.seals.check(seal, statement, host)
        except (TrustError, ValueError) as exc:
            raise NotAuthorized(f"a hop line of place {shown(line.came, 80)} does not hold: "
                                f"{exc}") from None
        return line, place

    def line(self, trip: Trip, went: str, got: str, sent: Briefcase,
             passport: Passport | None, ended: bool = False) -> bytes:
        """This place's sealed line: it hands hop `trip.hop` on to `went` (the trip's home,
        `ended`), having got a briefcase whose digest is `got`; b"" on an --insecure place."""
        if self.seals is None:
            return b""
        line = Line(trip.id, trip.hop, self.address, went, time.time(), got,
                    briefcase_digest(sent), passport.digest if passport else "", ended)
        return line.pack(self.seals.seal(line.statement()))

    def end_holds(self, path: list[PathStep], sender: str) -> str:
        """Why the end of a trip that place `sender` brings home, along `path`, is
        not to be taken ("" if it is): this place signed its first line, and the sender
        its last, an end. A place that holds a trip's passport cannot end it unseen."""
        if self.seals is None:
            return ""
        if not path:
            return "it carries no lines"
        first, last = path[0], path[-1]
        if first.place != self.name or first.note == _FOREIGN:
            return "its first line is not this place's"
        if not last.ended or last.place != sender or last.note == _FOREIGN:
            return f"its last line is not an end signed by {shown(sender, 80)}, which sent it"
        return ""

    def path(self, trip_id: str, lines: tuple[bytes, ...], passport: Passport | None
             ) -> list[PathStep]:
        """The path the end of trip `trip_id` took, from its lines, each checked: a line
        that does not hold, or a hand-over whose two sides disagree, is noted."""
        steps: list[PathStep] = []
        previous: Line | None = None
        digest = passport.digest if passport is not None else ""
        for raw in lines:
            note = ""
            try:
                line, place = self._checked(raw)
            except NotAuthorized as exc:
                steps.append(PathStep("?", "", "", 0.0, "", False, exc.message))
                previous = None
                continue
            if line.trip != trip_id or line.passport != digest:
                note = _FOREIGN
            elif previous is not None and line.hop > previous.hop + 1:
                note = (f"{line.hop - previous.hop - 1} hand-overs before it are not carried "
                        "(a trip carries its home's line and its latest)")
            elif previous is not None and previous.sent != line.got:
                note = (f"{place} says it got another briefcase than {previous.came} says "
                        "it handed over")
            steps.append(PathStep(place, line.came, line.went, line.at, line.sent,
                                  line.ended, note))
            previous = line
        return steps


@dataclass(frozen=True, slots=True)
class Carried:
    """What an agent carries from place to place besides its briefcase: its passport (None:
    it has none, and each place hands it on as itself), the lines of the places that
    handed it on, and the digest of the briefcase it arrived with here ("" at its home)."""

    passport: Passport | None = None
    lines: tuple[bytes, ...] = ()
    got: str = ""

    def papers(self, line: bytes) -> Papers:
        """Its papers, with this place's `line` added (none on an --insecure place)."""
        papers = Papers(self.passport.raw if self.passport is not None else b"", self.lines)
        return papers.with_line(line) if line else papers
