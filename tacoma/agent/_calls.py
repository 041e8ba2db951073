"""The agent API as requests of byte strings, for agents that run outside the worker's own
interpreter: a C agent's process (its socket) and a WebAssembly agent's instance (its host
imports) send the same requests, and a `Calls` answers them.

A message is a list of byte strings: a big-endian u32 count, then for each part a
big-endian u32 length and the bytes (tacoma.h writes them; `frame` and `Unframer` here).
A request's first part names the call, the rest are its arguments; the reply is
`ok VALUES...` or `error KIND MESSAGE`. The worker keeps the briefcases and the agent
holds handles (0 is its own briefcase: the meet's result):

    folders H               -> the folder names          new            -> a new handle
    folder H NAME           -> the elements               free H
    text H NAME             -> the elements, if UTF-8
    append H NAME BYTES                                   meet TARGET H MODE TIMEOUT
    replace H NAME ELEMS...                                   -> a handle (sync) or meet id
    remove H NAME                                         log LEVEL MESSAGE
    read H NAME OFFSET LENGTH -> the bytes                fail MESSAGE
    folder_size H NAME      -> its size in bytes          lazy H NAME
    place                   -> the place's address        go PLACE
    go_next -> 1 (went) or 0 (no places left)             reside NAME
    receive TIMEOUT -> a handle, 0: none                  reply MESSAGE_H REPLY_H
    send_ack TARGET H -> an ack handle                    wait_ack HANDLE TIMEOUT
    principal -> who launched the meet, or ""

Each call is a method `call_OP` of `Calls`. Standard library only (with the wire's
briefcase): this runs inside workers.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from ..wire._briefcase import Briefcase
from ..wire._errors import LimitExceeded, MeetError
from ._channel import AgentChannel, AgentFailure

__all__ = ["Calls", "Unframer", "frame", "output_since"]

#: What of an agent's output comes back with its failure: the end, enough for a backtrace.
OUTPUT_TAIL = 4096


def output_since(start: int, fd: int = 1) -> str:
    """The end of what the agent wrote to the meet's output (the worker's stdout, which
    an agent outside the worker's interpreter writes to directly; or `fd`) since offset
    `start`."""
    try:
        end = os.fstat(fd).st_size
        begin = max(start, end - OUTPUT_TAIL)
        data = os.pread(fd, end - begin, begin)
    except OSError:
        return ""
    text = data.decode("utf-8", "replace")
    return ("...\n" if begin > start else "") + text.strip()


def frame(parts: list[bytes]) -> bytes:
    """One message: the count, then each part with its length."""
    out = bytearray(len(parts).to_bytes(4, "big"))
    for part in parts:
        out += len(part).to_bytes(4, "big")
        out += part
    return bytes(out)


class Unframer:
    """Messages out of a stream of bytes (`feed` it; `next` gives each whole one).

    `most`: the largest part taken (the place's largest briefcase); a larger one fails the
    meet (AgentFailure) rather than being buffered. `what` names the agent in that error.
    """

    def __init__(self, most: int, what: str) -> None:
        self.most = most
        self.what = what
        self._buffer = bytearray()

    def feed(self, data: bytes) -> None:
        self._buffer += data

    def next(self) -> list[bytes] | None:
        """The next whole message, or None if more bytes are needed."""
        buf = self._buffer
        if len(buf) < 4:
            return None
        count = int.from_bytes(buf[:4], "big")
        offset, parts = 4, []
        for _ in range(count):
            if len(buf) < offset + 4:
                return None
            length = int.from_bytes(buf[offset:offset + 4], "big")
            if length > self.most:
                raise AgentFailure(f"{self.what} sent a part of {length:,} bytes, over the "
                                   f"largest briefcase of {self.most:,}")
            if len(buf) < offset + 4 + length:
                return None
            parts.append(bytes(buf[offset + 4:offset + 4 + length]))
            offset += 4 + length
        del buf[:offset]
        return parts

    def rest(self) -> int:
        """Bytes buffered that make no whole message yet."""
        return len(self._buffer)


class Calls:
    """One running agent's briefcases, by handle, and the answers to its calls."""

    def __init__(self, briefcase: Briefcase, channel: AgentChannel) -> None:
        self.channel = channel
        self.briefcases: dict[int, Briefcase] = {0: briefcase}
        self.next_handle = 1
        #: The message of the agent's `fail`, once it called it.
        self.failure: str | None = None
        #: The most bytes its briefcases may hold together: the largest briefcase a place
        #: takes, and no more than a quarter of its memory limit (the worker encodes the
        #: result too). Counted exactly only now and then (`_room`).
        memory = channel.plan.limits.memory_bytes if channel.plan is not None else 0
        self.most = min(channel.conn.max_frame, memory // 4) if memory else \
            channel.conn.max_frame
        self._added = 0

    def answer(self, request: list[bytes]) -> list[bytes]:
        """The reply to one request: `ok VALUES...` or `error KIND MESSAGE`."""
        try:
            return [b"ok", *self._call(request)]
        except MeetError as exc:
            return [b"error", exc.kind.encode(), exc.message.encode("utf-8", "replace")]
        except LimitExceeded as exc:
            return [b"error", exc.kind.encode(), str(exc).encode("utf-8", "replace")]
        except (ValueError, TypeError, KeyError, IndexError, UnicodeDecodeError) as exc:
            # (TypeError: an event's own checks, as of a log level or a meet's timeout)
            return [b"error", b"bad-argument", str(exc).encode("utf-8", "replace")]

    def _room(self, adding: int) -> None:
        """LimitExceeded if the briefcases would hold more than `most` bytes with `adding`
        more. The exact sum is taken once an eighth of `most` was added since the last."""
        self._added += adding
        if self._added < self.most // 8 and adding < self.most // 8:
            return
        held = sum(bc.held() for bc in self.briefcases.values())
        self._added = 0
        if held + adding > self.most:
            raise LimitExceeded(f"the agent's briefcases would hold {held + adding:,} bytes, "
                                f"over the {self.most:,} it may hold (free some handles)")

    def _briefcase(self, handle: bytes) -> Briefcase:
        try:
            return self.briefcases[int(handle)]
        except (KeyError, ValueError):
            raise ValueError(f"no briefcase with handle {handle.decode(errors='replace')}") \
                from None

    def _call(self, request: list[bytes]) -> list[bytes]:
        if not request:
            raise ValueError("empty request")
        op = request[0].decode()
        call = CALLS.get(op)
        if call is None:
            raise ValueError(f"unknown call {op!r}")
        return call(self, request[1:])

    def call_folders(self, args: list[bytes]) -> list[bytes]:
        return [name.encode() for name in self._briefcase(args[0]).folders()]

    def call_folder(self, args: list[bytes]) -> list[bytes]:
        return list(self._briefcase(args[0]).folder(args[1].decode()))

    def call_text(self, args: list[bytes]) -> list[bytes]:
        return [text.encode() for text in self._briefcase(args[0]).text(args[1].decode())]

    def call_append(self, args: list[bytes]) -> list[bytes]:
        briefcase = self._briefcase(args[0])
        self._room(len(args[2]))
        briefcase.append(args[1].decode(), args[2])
        return []

    def call_replace(self, args: list[bytes]) -> list[bytes]:
        briefcase = self._briefcase(args[0])
        self._room(sum(len(element) for element in args[2:]))
        briefcase.replace(args[1].decode(), list(args[2:]))
        return []

    def call_remove(self, args: list[bytes]) -> list[bytes]:
        self._briefcase(args[0]).remove(args[1].decode())
        return []

    def call_read(self, args: list[bytes]) -> list[bytes]:
        length = int(args[3])
        return [self._briefcase(args[0]).read(args[1].decode(), int(args[2]),
                                              None if length < 0 else length)]

    def call_folder_size(self, args: list[bytes]) -> list[bytes]:
        return [str(self._briefcase(args[0]).folder_size(args[1].decode())).encode()]

    def call_lazy(self, args: list[bytes]) -> list[bytes]:
        self._briefcase(args[0]).lazy(args[1].decode())
        return []

    def call_new(self, args: list[bytes]) -> list[bytes]:
        return [self._new(Briefcase())]

    def call_free(self, args: list[bytes]) -> list[bytes]:
        handle = int(args[0])
        if handle == 0:
            raise ValueError("the agent's own briefcase (TC_SELF) cannot be freed")
        self._briefcase(args[0])
        del self.briefcases[handle]
        return []

    def call_meet(self, args: list[bytes]) -> list[bytes]:
        target, bc, mode = args[0].decode(), self._briefcase(args[1]), args[2].decode()
        timeout = float(args[3]) or None
        answer = self.channel.meet(target, bc.copy(), mode, timeout)
        if isinstance(answer, Briefcase):
            return [self._new(answer)]
        return [answer.encode()]

    def call_log(self, args: list[bytes]) -> list[bytes]:
        self.channel.log(args[1].decode("utf-8", "replace"), args[0].decode() or "info")
        return []

    def call_fail(self, args: list[bytes]) -> list[bytes]:
        self.failure = args[0].decode("utf-8", "replace")
        return []

    def call_place(self, args: list[bytes]) -> list[bytes]:
        return [self.channel.place.encode()]

    def call_principal(self, args: list[bytes]) -> list[bytes]:
        return [self.channel.principal.encode()]

    def call_go(self, args: list[bytes]) -> list[bytes]:
        self.channel.go(args[0].decode(), self.briefcases[0], leave=False)
        return []

    def call_go_next(self, args: list[bytes]) -> list[bytes]:
        return [b"1" if self.channel.go_next(self.briefcases[0], leave=False) else b"0"]

    def call_reside(self, args: list[bytes]) -> list[bytes]:
        self.channel.reside(args[0].decode())
        return []

    def call_receive(self, args: list[bytes]) -> list[bytes]:
        timeout = float(args[0])
        message = self.channel.receive(None if timeout < 0 else timeout)
        return [self._new(message) if message is not None else b"0"]

    def call_reply(self, args: list[bytes]) -> list[bytes]:
        self.channel.reply(self._briefcase(args[0]), self._briefcase(args[1]))
        return []

    def call_send_ack(self, args: list[bytes]) -> list[bytes]:
        return [str(self.channel.send_ack(args[0].decode(),
                                          self._briefcase(args[1]).copy())).encode()]

    def call_wait_ack(self, args: list[bytes]) -> list[bytes]:
        timeout = float(args[1])
        self.channel.wait_ack(int(args[0]), None if timeout < 0 else timeout)
        return []

    def _new(self, briefcase: Briefcase) -> bytes:
        self._room(briefcase.held())
        handle = self.next_handle
        self.next_handle += 1
        self.briefcases[handle] = briefcase
        return str(handle).encode()


#: The calls an agent makes, by the name it sends: `Calls.call_NAME`.
CALLS: dict[str, Callable[[Calls, list[bytes]], list[bytes]]] = {
    name.removeprefix("call_"): method for name, method in vars(Calls).items()
    if name.startswith("call_")
}
