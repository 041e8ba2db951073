"""tacoma: mobile agents for Python, after TACOMA (Tromsø and Cornell Moving Agents).

An agent and its briefcase travel to a place, run there, and report back:

    >>> import tacoma
    >>> bc = tacoma.meet("ag_python@127.0.0.1:7707", code="bc['X'] = [b'hi']")

Layout: one package per process image, each with its own import rules (tests/test_layout.py
checks them):

    wire/     what every process imports: briefcase, events, the sans-IO protocol, errors,
              reserved names, trace records; standard library and msgpack, no I/O
    agent/    the agent's worker image: zygote, sandbox, the channel to its place, the one
              agent API table; imports wire only, never asyncio
    client/   meets over asyncio and the blocking face; imports wire, never place
    place/    the place daemon on asyncio; imports wire, agent and client
    cli/      the `tacoma` command, a thin face over this package's API
    bench/    the benchmark suite of the papers (`tacoma bench`)
    display/  tables and progress bars, in a terminal and in a notebook
    notebook/ `%load_ext tacoma`: the %%meet cell magic (the only package importing IPython)
    testing   the in-memory protocol pair, for tests and adapter authors

The public API is re-exported here. Imports are lazy (PEP 562): agent worker processes
import tacoma's packages, and must not pay for asyncio, uvloop and click at start-up.
`__all__` and the test of exports keep the list honest. A bare agent name meets at the
embedded place: the client does not know the place, so this package connects the two
(`_default_to_embedded_place`); nothing starts before the first such meet.
"""

from __future__ import annotations

import importlib

from ._version import __version__

# typing costs a worker ~9 ms to import; annotations are strings (PEP 563) anyway.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .agent import Build as Build
    from .agent import Interpreter as Interpreter
    from .client import Advice as Advice
    from .client import LocalPlaces as LocalPlaces
    from .client import MeetStatus as MeetStatus
    from .client import PlaceClient as PlaceClient
    from .client import PlaceStatus as PlaceStatus
    from .client import Traced as Traced
    from .client import advise as advise
    from .client import ameet as ameet
    from .client import aplace_status as aplace_status
    from .client import arequest as arequest
    from .client import aresult as aresult
    from .client import aresults as aresults
    from .client import asend as asend
    from .client import astatus as astatus
    from .client import atrace as atrace
    from .client import lazy as lazy
    from .client import local_places as local_places
    from .client import meet as meet
    from .client import place_status as place_status
    from .client import request as request
    from .client import result as result
    from .client import results as results
    from .client import send as send
    from .client import status as status
    from .client import trace as trace
    from .client import use_identity as use_identity
    from .place import Limits as Limits
    from .place import Place as Place
    from .place import PlaceSettings as PlaceSettings
    from .place import TripTimings as TripTimings
    from .wire import CODE as CODE
    from .wire import RESERVED_FOLDERS as RESERVED_FOLDERS
    from .wire import AgentFailed as AgentFailed
    from .wire import AgentKilled as AgentKilled
    from .wire import Briefcase as Briefcase
    from .wire import CabinetError as CabinetError
    from .wire import ConnectError as ConnectError
    from .wire import ConnectionLost as ConnectionLost
    from .wire import LazyFolderError as LazyFolderError
    from .wire import LimitExceeded as LimitExceeded
    from .wire import LocalProtocolError as LocalProtocolError
    from .wire import MailboxFull as MailboxFull
    from .wire import MeetError as MeetError
    from .wire import MeetTimeout as MeetTimeout
    from .wire import MessageError as MessageError
    from .wire import NotAllowed as NotAllowed
    from .wire import NotAuthorized as NotAuthorized
    from .wire import PlaceUnavailable as PlaceUnavailable
    from .wire import ProtocolError as ProtocolError
    from .wire import RemoteProtocolError as RemoteProtocolError
    from .wire import TacomaError as TacomaError
    from .wire import TransportError as TransportError
    from .wire import TrustError as TrustError
    from .wire import UnknownAgent as UnknownAgent
    from .wire import UnknownMeet as UnknownMeet

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
    "status": "client",
    "astatus": "client",
    "result": "client",
    "aresult": "client",
    "results": "client",
    "aresults": "client",
    "PlaceStatus": "client",
    "place_status": "client",
    "aplace_status": "client",
    "MeetStatus": "client",
    "Traced": "client",
    "atrace": "client",
    "trace": "client",
    "use_identity": "client",
    "lazy": "client",
    "advise": "client",
    "Advice": "client",
    "AgentFailed": "wire",
    "AgentKilled": "wire",
    "CabinetError": "wire",
    "ConnectError": "wire",
    "ConnectionLost": "wire",
    "LazyFolderError": "wire",
    "LimitExceeded": "wire",
    "LocalProtocolError": "wire",
    "MailboxFull": "wire",
    "MeetError": "wire",
    "MeetTimeout": "wire",
    "MessageError": "wire",
    "NotAllowed": "wire",
    "NotAuthorized": "wire",
    "TrustError": "wire",
    "PlaceUnavailable": "wire",
    "ProtocolError": "wire",
    "RemoteProtocolError": "wire",
    "TacomaError": "wire",
    "TransportError": "wire",
    "UnknownAgent": "wire",
    "UnknownMeet": "wire",
    "Build": "agent",
    "LocalPlaces": "client",
    "local_places": "client",
    "Interpreter": "agent",
    "Place": "place",
    "Limits": "place",
    "PlaceSettings": "place",
    "TripTimings": "place",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tacoma' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"tacoma.{module}"), name)
    if module == "client":
        _default_to_embedded_place()
    globals()[name] = value
    return value


def load_ipython_extension(ipython: Any) -> None:
    """`%load_ext tacoma` in IPython or Jupyter: the %%meet cell magic. IPython is imported
    here, when the extension is loaded, never by `import tacoma`."""
    from .notebook import load_ipython_extension as load

    load(ipython)


def _default_to_embedded_place() -> None:
    """Make bare agent names meet at the embedded place (place._embedded)."""
    from .client import set_default_place

    set_default_place(_embedded_address, replace=False)


def _embedded_running() -> bool:
    """Whether this process's embedded place has started (the notebook asks, after an
    interrupted meet, whether anything can have run)."""
    from .place._embedded import embedded_running

    return embedded_running()


async def _embedded_address() -> str:
    from .place._embedded import embedded_address

    return await embedded_address()


def __dir__() -> list[str]:
    return sorted(__all__)
