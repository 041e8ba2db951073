"""The place: the daemon that accepts meets, checks them, and starts agents.

Its lifecycle and sessions, the object that holds a running meet, the built-in agents,
agents' own meets, the worker pool and the place's end of the zygote, containment (cgroups,
uids, the confined runner), compiled builds, residents, trips, cabinets, settings, and the
embedded place. Runs on asyncio; may import `wire`, `agent` (for the Interpreter interface
and the sandbox plan) and `client` (a place meets other places as their client).
"""

from ._place import Place as Place
from ._settings import Limits as Limits
from ._settings import PlaceSettings as PlaceSettings

__all__ = ["Limits", "Place", "PlaceSettings"]
