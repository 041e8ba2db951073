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

    from ._briefcase import CODE as CODE
    from ._briefcase import RESERVED_FOLDERS as RESERVED_FOLDERS
    from ._briefcase import Briefcase as Briefcase
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
    from ._errors import AgentFailed as AgentFailed
    from ._errors import AgentKilled as AgentKilled
    from ._errors import CabinetError as CabinetError
    from ._errors import ConnectError as ConnectError
    from ._errors import ConnectionLost as ConnectionLost
    from ._errors import LimitExceeded as LimitExceeded
    from ._errors import LocalProtocolError as LocalProtocolError
    from ._errors import MailboxFull as MailboxFull
    from ._errors import MeetError as MeetError
    from ._errors import MeetTimeout as MeetTimeout
    from ._errors import MessageError as MessageError
    from ._errors import NotAllowed as NotAllowed
    from ._errors import PlaceUnavailable as PlaceUnavailable
    from ._errors import ProtocolError as ProtocolError
    from ._errors import RemoteProtocolError as RemoteProtocolError
    from ._errors import TacomaError as TacomaError
    from ._errors import TransportError as TransportError
    from ._errors import UnknownAgent as UnknownAgent
    from ._interpreter import Build as Build
    from ._interpreter import Interpreter as Interpreter
    from ._local import LocalPlaces as LocalPlaces
    from ._local import local_places as local_places
    from ._place import Place as Place
    from ._settings import Limits as Limits
    from ._settings import PlaceSettings as PlaceSettings

_EXPORTS: dict[str, str] = {
    "CODE": "_briefcase",
    "RESERVED_FOLDERS": "_briefcase",
    "Briefcase": "_briefcase",
    "PlaceClient": "_client",
    "ameet": "_client",
    "arequest": "_client",
    "asend": "_client",
    "meet": "_client",
    "request": "_client",
    "send": "_client",
    "Traced": "_client",
    "atrace": "_client",
    "trace": "_client",
    "AgentFailed": "_errors",
    "AgentKilled": "_errors",
    "CabinetError": "_errors",
    "ConnectError": "_errors",
    "ConnectionLost": "_errors",
    "LimitExceeded": "_errors",
    "LocalProtocolError": "_errors",
    "MailboxFull": "_errors",
    "MeetError": "_errors",
    "MeetTimeout": "_errors",
    "MessageError": "_errors",
    "NotAllowed": "_errors",
    "PlaceUnavailable": "_errors",
    "ProtocolError": "_errors",
    "RemoteProtocolError": "_errors",
    "TacomaError": "_errors",
    "TransportError": "_errors",
    "UnknownAgent": "_errors",
    "Build": "_interpreter",
    "LocalPlaces": "_local",
    "local_places": "_local",
    "Interpreter": "_interpreter",
    "Place": "_place",
    "Limits": "_settings",
    "PlaceSettings": "_settings",
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
