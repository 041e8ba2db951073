"""The one exception tree of tacoma.

Every error tacoma raises is a TacomaError. The tree follows where a fault lies:

    TacomaError
    ├── ProtocolError                 the wire was misused
    │   ├── LocalProtocolError        ... by us (a bug, or a value we refuse to send)
    │   └── RemoteProtocolError       ... by the peer (garbage, wrong version, bad frame)
    ├── LimitExceeded (ValueError)    a frame, folder or briefcase is over a configured limit
    ├── TrustError                    an identity or the CA cannot be used (missing, bad file)
    ├── TransportError (OSError)      the connection itself failed
    │   ├── ConnectError              could not connect (refused, unreachable, bad address)
    │   └── ConnectionLost            the peer went away in the middle of a meet
    └── MeetError                     the place answered: this meet failed
        ├── UnknownAgent (LookupError)
        ├── UnknownMeet (LookupError)
        ├── AgentFailed               the agent raised; carries the agent's traceback text
        ├── AgentKilled               the agent's process died (signal, limit hit)
        ├── MeetTimeout (TimeoutError)
        ├── PlaceUnavailable          the place is shutting down or cannot start workers
        ├── CabinetError              a cabinet request refused: malformed, or private
        ├── MailboxFull               a resident agent's mailbox has no room for the message
        ├── MessageError              a message refused: bad name, reply to no request, ...
        ├── NotAllowed                ps or kill without the admin role or the admin token
        ├── NotAuthorized             the place refused this identity (--allow, revoked)
        └── LazyFolderError           a lazy folder unreadable: origin gone, expired, bad hash

A failed meet travels over the wire as a `kind` string plus message and detail; `KINDS` maps
kinds to classes in both directions, so both ends agree on the whole set in one place.
OS and asyncio errors become TransportErrors at one boundary: `map_transport_errors`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = [
    "KINDS",
    "AgentFailed",
    "AgentKilled",
    "CabinetError",
    "ConnectError",
    "ConnectionLost",
    "LazyFolderError",
    "LimitExceeded",
    "LocalProtocolError",
    "MailboxFull",
    "MeetError",
    "MeetTimeout",
    "MessageError",
    "NotAllowed",
    "NotAuthorized",
    "PlaceUnavailable",
    "ProtocolError",
    "RemoteProtocolError",
    "TacomaError",
    "TransportError",
    "TrustError",
    "UnknownAgent",
    "UnknownMeet",
    "map_transport_errors",
]


class TacomaError(Exception):
    """Root of every error raised by tacoma."""

    #: Set on a connection's error when a path losing many packets could be the cause, so
    #: that trying again may succeed: the connection timed out, or was made and then reset
    #: or silent before the Hellos. Never set when the place refused or was unreachable,
    #: nor when the peer answered as something else.
    transient = False

    def _render_traceback_(self) -> list[str]:
        """The lines IPython shows for this error in a notebook cell (its hook for errors
        from elsewhere, as ipyparallel's RemoteError uses): the frames of the caller's own
        code, the error line, then the far side's text (`detail`: an agent's traceback).
        The frames of tacoma, asyncio and IPython in between say nothing to the reader and
        are left out; `traceback.print_exception` still shows them all."""
        import os
        import sysconfig
        import traceback

        from ._text import escape

        hidden = tuple(os.path.join(os.path.realpath(p), "") for p in (
            os.path.dirname(os.path.dirname(__file__)),  # tacoma itself
            *{sysconfig.get_path(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}))
        # A cell magic's line (%%meet) reaches Python as IPython's own call, which nobody
        # wrote: it is left out too.
        frames = [f for f in traceback.extract_tb(self.__traceback__)
                  if not os.path.realpath(f.filename).startswith(hidden)
                  and not (f.line or "").startswith("get_ipython().run_cell_magic(")]
        lines = []
        if frames:
            lines.append("Traceback (most recent call last):")
            lines += "".join(traceback.format_list(frames)).rstrip("\n").splitlines()
        # The public class's name: the remote limit and protocol failures are private.
        name = next(c.__name__ for c in type(self).__mro__ if not c.__name__.startswith("_"))
        # Escaped: the message and the detail are what an agent or a place said.
        lines.append(f"{name}: {escape(str(self))}")
        detail = getattr(self, "detail", "")
        if detail:
            lines += escape(detail.rstrip("\n"), newlines=True).split("\n")
        return lines


class ProtocolError(TacomaError):
    """The tacoma wire protocol was violated."""


class LocalProtocolError(ProtocolError):
    """We were about to violate the protocol (a bug, or a value that cannot be sent)."""


class RemoteProtocolError(ProtocolError):
    """The peer violated the protocol: malformed frame, wrong version, unexpected event."""


class LimitExceeded(TacomaError, ValueError):
    """A frame, folder or briefcase is larger than the limit in force."""

    #: Its kind on the wire, where a place or a worker reports it.
    kind = "limit-exceeded"


class TrustError(TacomaError):
    """An identity, the CA or the deny list cannot be used: missing, unreadable, not made
    by tacoma trust, or not fit for its use (a client's identity for a place, say)."""


class TransportError(TacomaError, OSError):
    """The connection failed underneath the protocol."""


class ConnectError(TransportError):
    """Could not connect to the place (refused, unreachable, bad address)."""


class ConnectionLost(TransportError):
    """The connection closed while a meet was still waiting for its answer.

    `meet_id` is the meet's id when the client chose it (tacoma.meet does): its outcome is
    unknown to the caller, who can ask the place for it by id (`tacoma status`).
    """

    def __init__(self, *args: object, meet_id: str = "") -> None:
        super().__init__(*args)
        self.meet_id = meet_id


class MeetError(TacomaError):
    """The place answered that the meet failed.

    `detail` holds supporting text from the far side: the agent's traceback, the tail of its
    stderr, or the list of agents the place has.
    """

    kind = "meet-failed"

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail

    def __reduce__(self) -> tuple[type[MeetError], tuple[str, str]]:
        return (type(self), (self.message, self.detail))


class UnknownAgent(MeetError, LookupError):
    """The place has no agent by that name; `detail` lists the agents it has."""

    kind = "unknown-agent"


class CodeUnknown(MeetError, LookupError):
    """The place does not have the program a meet named by its hash (CODE_HASH): the client
    sends the meet again with the program itself. Seen by a caller only from a client that
    named a program it did not send before."""

    kind = "code-unknown"


class UnknownMeet(MeetError, LookupError):
    """The place has no record of that meet id (see place.promises._journal: what
    "unknown" means)."""

    kind = "unknown-meet"


class AgentFailed(MeetError):
    """The agent raised an error; `detail` is its traceback as the agent's language wrote it."""

    kind = "agent-failed"


class AgentKilled(MeetError):
    """The agent's process died before it answered: a signal, or a resource limit hit."""

    kind = "agent-killed"


class MeetTimeout(MeetError, TimeoutError):
    """The meet did not finish within its timeout; the agent's processes were killed."""

    kind = "timeout"


class PlaceUnavailable(MeetError):
    """The place is shutting down or cannot start a worker for this meet."""

    kind = "unavailable"


class CabinetError(MeetError):
    """A cabinet request was refused: malformed, or a cabinet waiting for its owner to be
    named."""

    kind = "cabinet"


class MailboxFull(MeetError):
    """A resident agent's mailbox is full (messages or bytes): send again later."""

    kind = "mailbox-full"


class MessageError(MeetError):
    """A message was refused: a bad resident name, a reply to no request, a resident that
    ended before answering."""

    kind = "message"


class NotAllowed(MeetError):
    """An administrative request (ps, kill) without the place's admin token."""

    kind = "not-allowed"


class LazyFolderError(MeetError):
    """A lazy folder could not be read: its origin is gone or no longer holds it (the meet
    that made it ended, or its lifetime passed), or what came does not match its hash."""

    kind = "lazy-folder"


class NotAuthorized(MeetError):
    """The place refused the identity that met it: it may not meet that agent there
    (`tacoma place --allow`), its certificate is revoked, or it claims what its certificate
    does not give it (to speak for another principal, to be a place)."""

    kind = "not-authorized"

    #: A place's Bye that refuses a connection for its identity starts with this.
    BYE_PREFIX = "not authorized: "


class _RemoteLimitExceeded(MeetError, LimitExceeded):
    """A limit was exceeded at the place (a result briefcase too large, say)."""

    kind = LimitExceeded.kind


class _RemoteProtocolFailure(MeetError, RemoteProtocolError):
    """The place rejected what we sent as a protocol violation."""

    kind = "protocol"


KINDS: dict[str, type[MeetError]] = {
    cls.kind: cls
    for cls in (
        MeetError,
        UnknownAgent,
        CodeUnknown,
        UnknownMeet,
        AgentFailed,
        AgentKilled,
        MeetTimeout,
        PlaceUnavailable,
        CabinetError,
        MailboxFull,
        MessageError,
        NotAllowed,
        NotAuthorized,
        LazyFolderError,
        _RemoteLimitExceeded,
        _RemoteProtocolFailure,
    )
}


def error_from_wire(kind: str, message: str, detail: str) -> MeetError:
    """The exception for a failure the place reported; unknown kinds stay plain MeetErrors."""
    return KINDS.get(kind, MeetError)(message, detail)


def kind_of(exc: BaseException) -> str:
    """The wire kind for an exception raised while serving a meet."""
    if isinstance(exc, MeetError):
        return exc.kind
    if isinstance(exc, LimitExceeded):
        return _RemoteLimitExceeded.kind
    if isinstance(exc, ProtocolError):
        return _RemoteProtocolFailure.kind
    if isinstance(exc, TransportError):  # a place the meet needed is down or unreachable
        return PlaceUnavailable.kind
    return MeetError.kind


@contextlib.contextmanager
def map_transport_errors(where: str) -> Iterator[None]:
    """Turn OS and asyncio connection errors into TransportErrors (the one boundary)."""
    try:
        yield
    except TacomaError:
        raise
    except (ConnectionRefusedError, TimeoutError, OSError) as exc:
        if isinstance(exc, ConnectionResetError | BrokenPipeError):
            raise ConnectionLost(f"{where}: connection lost ({exc.strerror or exc})") from exc
        if isinstance(exc, TimeoutError) and not exc.strerror:
            raise ConnectError(f"{where}: timed out (is the place up and reachable?)") from exc
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise ConnectError(f"{where}: {reason}") from exc
