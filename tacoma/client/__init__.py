"""The client: meeting agents at places, over asyncio, and its blocking face.

Connections cached per place, the asyncio driver around the protocol core, the background
loop that serves blocking calls from scripts and notebook cells, and local places (real
`tacoma place` processes) for trying moving agents. The client never imports the place: a
bare agent name meets at a default place that the public `tacoma` package provides.
"""

from ._api import ameet as ameet
from ._api import arequest as arequest
from ._api import asend as asend
from ._api import meet as meet
from ._api import request as request
from ._api import send as send
from ._client import PlaceClient as PlaceClient
from ._client import set_default_place as set_default_place
from ._identity import current_principal as current_principal
from ._identity import use_identity as use_identity
from ._local import LocalPlaces as LocalPlaces
from ._local import local_places as local_places
from ._traced import Traced as Traced
from ._traced import atrace as atrace
from ._traced import trace as trace

__all__ = ["LocalPlaces", "PlaceClient", "Traced", "ameet", "arequest", "asend", "atrace",
           "current_principal", "local_places", "meet", "request", "send",
           "set_default_place", "trace", "use_identity"]
