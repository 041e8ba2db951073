"""Connections over asyncio: the driver around the sans-IO protocol of `wire`.

Owns one Channel per connection (`_channel`: its Hello, its bounds on what it receives, a
large frame decoded on a thread), what waits to be written, in order (`_outbox`: a large
frame encoded on a thread and written a piece at a time), and giving freed memory back
(`_trim`). Clients, places and the socketpair between a place and its workers all speak
through it. May import `wire` and `trust` (a TLS peer's identity), nothing else of tacoma.
"""

from __future__ import annotations

from ._channel import Channel as Channel
from ._channel import EventHandler as EventHandler
from ._channel import ReceiveBudget as ReceiveBudget
from ._channel import Refused as Refused
from ._channel import connect as connect

__all__ = ["Channel", "EventHandler", "ReceiveBudget", "Refused", "connect"]
