"""The client: meeting agents at places, over asyncio, and its blocking face.

Connections cached per place (each a `tacoma.transport` Channel), the background loop that
serves blocking calls from scripts and notebook cells, and local places (real `tacoma
place` processes) for trying moving agents. The client never imports the place: a
bare agent name meets at a default place that the public `tacoma` package provides.
"""

from ._advise import Advice as Advice
from ._advise import advise as advise
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
from ._lazy import lazy as lazy
from ._local import LocalPlaces as LocalPlaces
from ._local import local_places as local_places
from ._place_status import PlaceStatus as PlaceStatus
from ._place_status import aplace_status as aplace_status
from ._place_status import place_status as place_status
from ._status import MeetStatus as MeetStatus
from ._status import PathStep as PathStep
from ._status import aresult as aresult
from ._status import aresults as aresults
from ._status import astatus as astatus
from ._status import result as result
from ._status import results as results
from ._status import status as status
from ._traced import Traced as Traced
from ._traced import atrace as atrace
from ._traced import trace as trace

__all__ = [
           "Advice",
           "LocalPlaces",
           "MeetStatus",
           "PathStep",
           "PlaceClient",
           "PlaceStatus",
           "Traced",
           "advise",
           "ameet",
           "aplace_status",
           "arequest",
           "aresult",
           "aresults",
           "asend",
           "astatus",
           "atrace",
           "current_principal",
           "lazy",
           "local_places",
           "meet",
           "place_status",
           "request",
           "result",
           "results",
           "send",
           "set_default_place",
           "status",
           "trace",
           "use_identity",
]
