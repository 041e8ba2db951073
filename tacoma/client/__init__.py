"""The client: meeting agents at places, over asyncio, and its blocking face.

Connections cached per place, the asyncio driver around the protocol core, the background
loop that serves blocking calls from scripts and notebook cells, and local places (real
`tacoma place` processes) for trying moving agents. The client never imports the place: a
bare agent name meets at a default place that the public `tacoma` package provides.
"""

from ._client import PlaceClient as PlaceClient
from ._client import Traced as Traced
from ._client import ameet as ameet
from ._client import arequest as arequest
from ._client import asend as asend
from ._client import atrace as atrace
from ._client import meet as meet
from ._client import request as request
from ._client import send as send
from ._client import trace as trace
from ._local import LocalPlaces as LocalPlaces
from ._local import local_places as local_places

__all__ = ["LocalPlaces", "PlaceClient", "Traced", "ameet", "arequest", "asend", "atrace",
           "local_places", "meet", "request", "send", "trace"]
