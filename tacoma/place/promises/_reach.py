"""The place's connections to other places on its agents' behalf, where an agent chose the
address: its meets elsewhere (`meet("ag_x@HOST:PORT")`), its moves (`go`), the places of
its ITINERARY a rear guard skips to.

An agent has no network of its own; its place connects for it. If the place said how each
address failed (refused, reset, not TLS), any agent could map the network the place sits
in, port by port: a scanner with the place's address. So an address at which no place of
the cluster has answered yet (not *known*) is tried under two rules: a failure is said
alike however it happened ("cannot be reached"), and not before PAD seconds have passed
since the attempt began, so that a refused port and one that answered as something else
take as long; and a principal may have at most FAILURES such failures a minute
(LimitExceeded past that). An address where a place answered (its certificate a place's of
this cluster's CA) is known from then on, and failures there are reported in full, as they
say nothing new. What each failure was is in the place's log. A silent address still takes
longer to fail than PAD (the connection's own timeout, and the retries of a path that
loses packets, which a first hop to a real place needs too): that much a patient scanner
learns, FAILURES addresses a minute.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time

from ...client._client import ClientCache, PlaceClient
from ...wire._address import canonical_address
from ...wire._errors import ConnectError, LimitExceeded, PlaceUnavailable, TacomaError
from ...wire._text import shown

__all__ = ["Reach"]

log = logging.getLogger("tacoma.place")


class Reach:
    """Connections made for agents (see the module)."""

    #: Seconds an attempt at an unknown address takes at least, if it fails.
    PAD = 1.0
    #: Failures at unknown addresses one principal's agents may have in a WINDOW.
    FAILURES = 8
    WINDOW = 60.0
    #: Addresses remembered as known, and principals' failures kept (the oldest forgotten).
    KEEP = 4096

    def __init__(self, clients: ClientCache, here: str) -> None:
        self.clients = clients
        self.here = here
        self._known: dict[str, None] = {}  # ordered: the oldest are forgotten first
        self._failures: dict[str, collections.deque[float]] = {}

    async def get(self, address: str, principal: str, timeout: float,
                  until: float | None = None) -> PlaceClient:
        """The connection to the place at `address`, for an agent of `principal` (see the
        module); `timeout` bounds each attempt at a known address, `until` (monotonic) the
        retries of transient failures there (ClientCache.get)."""
        try:
            address = canonical_address(address)
        except ValueError as exc:
            raise ConnectError(str(exc)) from None
        if address in self._known or address in self.clients.clients:
            client = await self.clients.get(address, timeout, until)
            self._learn(address)
            return client
        self._may_try(principal, address)
        started = time.monotonic()
        try:
            client = await self.clients.get(address, timeout, until)
        except TacomaError as exc:
            self._failed(principal)
            log.info("an agent of %s could not reach %s: %s", shown(principal, 80),
                     shown(address, 80), exc)
            await asyncio.sleep(max(0.0, self.PAD - (time.monotonic() - started)))
            raise PlaceUnavailable(f"place {address} cannot be reached from place "
                                   f"{self.here}") from None
        self._learn(address)
        return client

    def _learn(self, address: str) -> None:
        self._known.pop(address, None)
        self._known[address] = None
        while len(self._known) > self.KEEP:
            del self._known[next(iter(self._known))]

    def _recent(self, principal: str) -> collections.deque[float]:
        failures = self._failures.get(principal)
        if failures is None:
            failures = self._failures[principal] = collections.deque()
            while len(self._failures) > self.KEEP:
                del self._failures[next(iter(self._failures))]
        now = time.monotonic()
        while failures and failures[0] < now - self.WINDOW:
            failures.popleft()
        return failures

    def _may_try(self, principal: str, address: str) -> None:
        if len(self._recent(principal)) >= self.FAILURES:
            raise LimitExceeded(
                f"the agents of {principal or 'anonymous'} tried {self.FAILURES} places that "
                f"could not be reached within {self.WINDOW:g} s: place {self.here} tries no "
                f"new one ({address}) for them now; try again later")

    def _failed(self, principal: str) -> None:
        self._recent(principal).append(time.monotonic())
