"""The place: the daemon that accepts meets, checks them, and starts agents.

Its lifecycle and sessions, the object that holds a running meet, the built-in agents,
agents' own meets, the worker pool and the place's end of the zygote, containment (cgroups,
uids, the confined runner), compiled builds, residents, trips, cabinets, settings, and the
embedded place. Runs on asyncio; may import `wire`, `agent` (for the Interpreter interface
and the sandbox plan), `transport` (its connections), `trust` and `client` (a place meets
other places as their client).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._place import Place as Place
    from ._settings import Limits as Limits
    from ._settings import PlaceSettings as PlaceSettings
    from ._settings import TripTimings as TripTimings

# Lazy (PEP 562), as tacoma's own __init__: the CLI reads the settings' defaults for its
# help text, and must not load the whole place (and asyncio) to print it.
_EXPORTS = {"Place": "_place", "Limits": "_settings", "PlaceSettings": "_settings",
            "TripTimings": "_settings"}

__all__ = ["Limits", "Place", "PlaceSettings", "TripTimings"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tacoma.place' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
