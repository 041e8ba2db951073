"""tacoma: mobile agents for Python, after TACOMA (Tromsø and Cornell Moving Agents).

An agent and its briefcase travel to a place, run there, and report back:

    >>> import tacoma
    >>> bc = tacoma.meet("ag_python@127.0.0.1:7707", code="bc['X'] = [b'hi']")

The public API is re-exported here. Imports are lazy (PEP 562): agent worker processes
import tacoma's protocol modules, and must not pay for asyncio, uvloop and click at start-up.
`__all__` and the test of exports keep the list honest.
"""

from __future__ import annotations

import importlib

from ._version import __version__

# typing costs a worker ~9 ms to import; annotations are strings (PEP 563) anyway.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .agent._interpreter import Build as Build
    from .agent._interpreter import Interpreter as Interpreter
    from .client._client import PlaceClient as PlaceClient
    from .client._client import Traced as Traced
    from .client._client import ameet as ameet
    from .client._client import arequest as arequest
    from .client._client import asend as asend
    from .client._client import atrace as atrace
    from .client._client import meet as meet
    from .client._client import request as request
    from .client._client import send as send
    from .client._client import trace as trace
    from .client._local import LocalPlaces as LocalPlaces
    from .client._local import local_places as local_places
    from .place._place import Place as Place
    from .place._settings import Limits as Limits
    from .place._settings import PlaceSettings as PlaceSettings
    from .wire._briefcase import CODE as CODE
    from .wire._briefcase import RESERVED_FOLDERS as RESERVED_FOLDERS
    from .wire._briefcase import Briefcase as Briefcase
    from .wire._errors import AgentFailed as AgentFailed
    from .wire._errors import AgentKilled as AgentKilled
    from .wire._errors import CabinetError as CabinetError
    from .wire._errors import ConnectError as ConnectError
    from .wire._errors import ConnectionLost as ConnectionLost
    from .wire._errors import LimitExceeded as LimitExceeded
    from .wire._errors import LocalProtocolError as LocalProtocolError
    from .wire._errors import MailboxFull as MailboxFull
    from .wire._errors import MeetError as MeetError
    from .wire._errors import MeetTimeout as MeetTimeout
    from .wire._errors import MessageError as MessageError
    from .wire._errors import NotAllowed as NotAllowed
    from .wire._errors import PlaceUnavailable as PlaceUnavailable
    from .wire._errors import ProtocolError as ProtocolError
    from .wire._errors import RemoteProtocolError as RemoteProtocolError
    from .wire._errors import TacomaError as TacomaError
    from .wire._errors import TransportError as TransportError
    from .wire._errors import UnknownAgent as UnknownAgent

_EXPORTS: dict[str, str] = {
    "CODE": "wire",
    "RESERVED_FOLDERS": "wire",
    "Briefcase": "wire",
    "PlaceClient": "client",
    "ameet": "client",
    "arequest": "client",
    "asend": "client",
    "meet": "client",
    "request": "client",
    "send": "client",
    "Traced": "client",
    "atrace": "client",
    "trace": "client",
    "AgentFailed": "wire",
    "AgentKilled": "wire",
    "CabinetError": "wire",
    "ConnectError": "wire",
    "ConnectionLost": "wire",
    "LimitExceeded": "wire",
    "LocalProtocolError": "wire",
    "MailboxFull": "wire",
    "MeetError": "wire",
    "MeetTimeout": "wire",
    "MessageError": "wire",
    "NotAllowed": "wire",
    "PlaceUnavailable": "wire",
    "ProtocolError": "wire",
    "RemoteProtocolError": "wire",
    "TacomaError": "wire",
    "TransportError": "wire",
    "UnknownAgent": "wire",
    "Build": "agent",
    "LocalPlaces": "client",
    "local_places": "client",
    "Interpreter": "agent",
    "Place": "place",
    "Limits": "place",
    "PlaceSettings": "place",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tacoma' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"tacoma.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
