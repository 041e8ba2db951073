"""What every process of tacoma imports: the wire format and the words it is made of.

The briefcase, the events and the sans-IO protocol core, the one exception tree, the
reserved names of agents and folders, traced-meet records and the program helpers. Standard
library and msgpack only, and no I/O: the agent's worker, the place and the client all
import this package, so it must stay light (a test checks that it imports no asyncio).
"""

from ._briefcase import CODE as CODE
from ._briefcase import CODE_NAME as CODE_NAME
from ._briefcase import RESERVED_FOLDERS as RESERVED_FOLDERS
from ._briefcase import Briefcase as Briefcase
from ._errors import AgentFailed as AgentFailed
from ._errors import AgentKilled as AgentKilled
from ._errors import CabinetError as CabinetError
from ._errors import ConnectError as ConnectError
from ._errors import ConnectionLost as ConnectionLost
from ._errors import LazyFolderError as LazyFolderError
from ._errors import LimitExceeded as LimitExceeded
from ._errors import LocalProtocolError as LocalProtocolError
from ._errors import MailboxFull as MailboxFull
from ._errors import MeetError as MeetError
from ._errors import MeetTimeout as MeetTimeout
from ._errors import MessageError as MessageError
from ._errors import NotAllowed as NotAllowed
from ._errors import NotAuthorized as NotAuthorized
from ._errors import PlaceUnavailable as PlaceUnavailable
from ._errors import ProtocolError as ProtocolError
from ._errors import RemoteProtocolError as RemoteProtocolError
from ._errors import TacomaError as TacomaError
from ._errors import TransportError as TransportError
from ._errors import TrustError as TrustError
from ._errors import UnknownAgent as UnknownAgent
from ._errors import UnknownMeet as UnknownMeet

__all__ = [
    "CODE", "CODE_NAME", "RESERVED_FOLDERS", "AgentFailed", "AgentKilled", "Briefcase",
    "CabinetError",
    "ConnectError", "ConnectionLost", "LazyFolderError", "LimitExceeded", "LocalProtocolError",
    "MailboxFull",
    "MeetError", "MeetTimeout", "MessageError", "NotAllowed", "NotAuthorized",
    "PlaceUnavailable", "ProtocolError", "RemoteProtocolError", "TacomaError", "TransportError",
    "TrustError", "UnknownAgent", "UnknownMeet",
]
