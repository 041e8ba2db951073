"""Resident agents and their mailboxes: messages between agents.

An agent running at a place can become *resident* under a name (`reside`). From then on a
meet with `NAME@PLACE` does not start an agent: it is a message to the resident, put in its
mailbox. The meet's mode says what kind of message it is and when the sender hears back:

    async  one-way      the place answers Accepted (the message id) once the message is
                        in the mailbox; the resident never answers
    ack    acknowledged the place answers (an empty briefcase) when the resident takes it
    sync   request      the place answers with the resident's reply

So sending is meeting, at this place or another, from a client or an agent, with nothing new
on the wire but the `ack` mode. The resident takes messages with `receive` and answers
requests with `reply`: meets of the built-in `ag_mailbox` over its own worker channel, which
only a worker can reach (a client or a place meeting ag_mailbox is refused: NotAllowed).

Mailboxes are bounded in messages and bytes (`PlaceSettings.mailbox_messages`,
`mailbox_bytes`): a full mailbox refuses the message with MailboxFull, so a slow resident
costs its senders an error, never the place its memory. When a resident ends (returns,
fails, is killed, or its meet times out) its name is free again, and every sender still
waiting (an ack or a reply) gets MessageError saying so.

A received message is the sender's briefcase plus an ENVELOPE folder: the message id, its
kind (oneway, ack or request), who sent it (`NAME@PLACE` for a resident at this place,
another agent here by its identity, and "client" for whatever arrives over the network,
agents at other places included: a place vouches only for its own agents), and the
principal whose meet sent it (the name in the certificate of the client that launched it,
as this place authenticated it or a place it trusts vouched for it; "" on a place that
authenticates nobody), so that a resident knows whom it answers. The first three stay
where they were: agents read them by position.

All mailboxes of a place together are bounded too (`mailbox_total_bytes`), and so are the
bytes waiting that any one principal sent (its `share` of them: one principal cannot fill
the place's mailboxes, its own residents' included, against everyone else's). In each
mailbox, a principal other than the resident's own may have at most its `share` of its
messages and bytes waiting, so that no one fills another's mailbox (the resident's own
principal may fill it, it is its own). A resident holds at most `mailbox_messages` requests
it took but did not answer yet (their briefcases are dropped once taken; a request whose
sender gave up is forgotten).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import re
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ...wire._briefcase import ENVELOPE, Briefcase
from ...wire._errors import (
    MailboxFull,
    MeetTimeout,
    MessageError,
    PlaceUnavailable,
    UnknownAgent,
)
from ...wire._protocol import Meet

if TYPE_CHECKING:
    from ._meet import RunningMeet

__all__ = ["Residents"]

#: Resident names: short, plain, and never an `ag_` name (those are the place's agents).
NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")
#: The shape of the ids a place makes for meets (_meet.Meets.new: 10 hex digits, a dot, a
#: number): no resident's name, or `tacoma kill NAME` could mean either.
MEET_ID_SHAPE = re.compile(r"[0-9A-Fa-f]{10}\.[0-9]+")
#: Message kind by the mode of the meet that carried it.
KIND_OF_MODE = {"async": "oneway", "ack": "ack", "sync": "request"}
#: Folders of a reply request that are not part of the reply.
_REPLY_FOLDERS = ("OP", "ID")


@dataclass(eq=False)
class Message:
    id: str
    kind: str
    sender: str
    briefcase: Briefcase
    size: int
    principal: str  # whose meet sent it: its bytes count against that principal's share
    #: Set when the sender hears back: on taking (ack) or on the reply (request).
    answer: asyncio.Future[Briefcase] | None = None


@dataclass(eq=False)
class Resident:
    name: str
    meet: RunningMeet  # the meet whose agent is resident
    started: float = field(default_factory=time.time)
    queue: deque[Message] = field(default_factory=deque)
    bytes: int = 0
    received: int = 0
    waiter: asyncio.Future[None] | None = None
    #: Requests taken by the resident and not yet replied to, by message id.
    unanswered: dict[str, Message] = field(default_factory=dict)
    #: Messages and bytes waiting in its mailbox, by the principal that sent them.
    messages_of: collections.Counter[str] = field(default_factory=collections.Counter)
    bytes_of: collections.Counter[str] = field(default_factory=collections.Counter)


def _size(briefcase: Briefcase) -> int:
    return briefcase.wire_size()


def _less(counter: collections.Counter[str], key: str, amount: int) -> None:
    """Count `amount` less for `key`, forgetting it at 0 (counters keyed by principal must
    not grow with every principal ever seen)."""
    left = counter[key] - amount
    if left > 0:
        counter[key] = left
    else:
        del counter[key]


class Residents:
    """The resident agents of one place, by name, and their mailboxes."""

    def __init__(self, max_messages: int, max_bytes: int, max_total_bytes: int,
                 is_agent: Callable[[str], bool], share: float = 1.0) -> None:
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.max_total_bytes = max_total_bytes
        self.total_bytes = 0
        #: Bytes waiting in mailboxes by the principal that sent them, and the most any one
        #: principal may have waiting.
        self.by_principal: collections.Counter[str] = collections.Counter()
        self.principal_share = max(1, int(max_total_bytes * share))
        #: What any one principal may have waiting in another's resident's mailbox: its
        #: share of its messages and bytes.
        self.messages_share = max(1, int(max_messages * share))
        self.bytes_share = max(1, int(max_bytes * share))
        self.is_agent = is_agent  # a name the place has an agent by: not for residents
        self.by_name: dict[str, Resident] = {}
        self.closing = False
        self._ids = itertools.count(1)

    def get(self, name: str) -> Resident | None:
        return self.by_name.get(name)

    def of(self, meet: RunningMeet) -> Resident | None:
        resident = self.by_name.get(meet.resident or "")
        return resident if resident is not None and resident.meet is meet else None

    # ------------------------------------------------------------------ senders
    def deliver(self, name: str, mode: str, briefcase: Briefcase, sender: str,
                principal: str = "") -> Message:
        """Put a message from `principal`'s meet for `name` in its mailbox; raises
        UnknownAgent or MailboxFull."""
        resident = self.by_name.get(name)
        if resident is None:
            raise UnknownAgent(f"no resident agent {name!r} here")
        size = _size(briefcase)
        if size > self.max_bytes:
            raise MailboxFull(f"a message of {size:,} bytes can never fit in a mailbox here "
                              f"(at most {self.max_bytes:,} bytes)")
        if len(resident.queue) >= self.max_messages or resident.bytes + size > self.max_bytes:
            raise MailboxFull(
                f"the mailbox of {name} is full ({len(resident.queue)} messages, "
                f"{resident.bytes:,} bytes; at most {self.max_messages} and "
                f"{self.max_bytes:,}): try again when it has taken some")
        if principal != resident.meet.principal:
            self._within_share(resident, principal, size)
        if self.total_bytes + size > self.max_total_bytes:
            raise MailboxFull(f"the mailboxes at this place hold {self.total_bytes:,} bytes, "
                              f"their limit is {self.max_total_bytes:,}: try again later")
        if self.by_principal[principal] + size > self.principal_share:
            raise MailboxFull(f"{principal or 'anonymous'} has {self.by_principal[principal]:,} "
                              f"bytes of messages waiting at this place, which lets any one "
                              f"principal have {self.principal_share:,} (--share of "
                              "--mailbox-total-bytes): try again when some are taken")
        kind = KIND_OF_MODE[mode]
        answer = asyncio.get_running_loop().create_future() if kind != "oneway" else None
        message = Message(f"{name}.{next(self._ids)}", kind, sender, briefcase, size, principal,
                          answer)
        resident.queue.append(message)
        resident.bytes += size
        resident.messages_of[principal] += 1
        resident.bytes_of[principal] += size
        self.total_bytes += size
        self.by_principal[principal] += size
        if resident.waiter is not None and not resident.waiter.done():
            resident.waiter.set_result(None)
        return message

    @staticmethod
    async def answer_of(meet: Meet, answer: asyncio.Future[Briefcase],
                        timeout: float) -> Briefcase:
        """The resident's answer to a message: its reply (sync) or that it took it (ack)."""
        try:
            async with asyncio.timeout(timeout):
                return await answer
        except TimeoutError:
            if answer.done() and not answer.cancelled():
                raise
            what = "take the message" if meet.mode == "ack" else "reply"
            raise MeetTimeout(f"{meet.agent} did not {what} within {timeout:g} s") from None

    # ------------------------------------------------------------------ the resident's side
    async def serve(self, meet: RunningMeet, request: Briefcase) -> Briefcase:
        """Answer the ag_mailbox meet of `meet`'s agent: OP reside, receive, reply or leave."""
        op = request.text("OP")[0] if request.folder("OP") else ""
        if op == "reside":
            return self._reside(meet, request)
        resident = self.of(meet)
        if resident is None:
            raise MessageError(f"{op or 'a mailbox request'} needs a resident agent: "
                               "call reside(NAME) first")
        if op == "receive":
            return await self._receive(resident, request)
        if op == "reply":
            return self._reply(resident, request)
        if op == "leave":
            self.leave(meet)
            return Briefcase()
        raise MessageError(f"unknown mailbox operation {op!r}: reside, receive, reply or leave")

    def _reside(self, meet: RunningMeet, request: Briefcase) -> Briefcase:
        names = request.text("NAME") if request.folder("NAME") else []
        name = names[0] if names else ""
        if not NAME.fullmatch(name) or name.startswith("ag_") or MEET_ID_SHAPE.fullmatch(name):
            raise MessageError(f"bad resident name {name!r}: a letter, then up to 63 letters, "
                               "digits, '_', '.' or '-', not starting with ag_, and not "
                               "shaped like the ids a place makes for meets (10 hex digits, "
                               "a dot, a number)")
        if meet.resident is not None:
            raise MessageError(f"this agent is already resident as {meet.resident}")
        if name in self.by_name:
            raise MessageError(f"a resident agent named {name} is already here")
        if self.is_agent(name):
            raise MessageError(f"this place has an agent named {name}: a resident cannot "
                               "take its name")
        self.by_name[name] = Resident(name, meet)
        meet.resident = name
        return Briefcase()

    async def _receive(self, resident: Resident, request: Briefcase) -> Briefcase:
        timeout: float | None = None
        if request.folder("TIMEOUT"):
            try:
                timeout = float(request.text("TIMEOUT")[0])
            except ValueError:
                raise MessageError("TIMEOUT must be a number of seconds") from None
        if resident.waiter is not None:
            raise MessageError("a receive is already waiting: take messages one at a time")
        if not resident.queue and timeout != 0 and not self.closing:
            resident.waiter = asyncio.get_running_loop().create_future()
            try:
                await asyncio.wait_for(asyncio.shield(resident.waiter), timeout)
            except TimeoutError:
                pass
            finally:
                resident.waiter = None
        if not resident.queue:
            return Briefcase()  # timed out: no ENVELOPE
        if resident.queue[0].kind == "request" and \
                len(resident.unanswered) >= self.max_messages:
            raise MessageError(f"{len(resident.unanswered)} requests taken by {resident.name} "
                               "wait for replies: reply to some before taking more")
        message = resident.queue.popleft()
        resident.bytes -= message.size
        self.total_bytes -= message.size
        self._taken(message, resident)
        resident.received += 1
        taken = message.briefcase
        message.briefcase = Briefcase()  # the resident has it now: the place keeps nothing
        if message.kind == "ack" and message.answer is not None and not message.answer.done():
            message.answer.set_result(Briefcase())
        elif message.kind == "request" and message.answer is not None:
            resident.unanswered[message.id] = message
            # A sender that gives up (timeout, cancel) cancels the answer: forget it then.
            message.answer.add_done_callback(
                lambda _: resident.unanswered.pop(message.id, None))
        taken[ENVELOPE] = [message.id, message.kind, message.sender, message.principal]
        return taken

    def _reply(self, resident: Resident, request: Briefcase) -> Briefcase:
        ids = request.text("ID") if request.folder("ID") else []
        message = resident.unanswered.pop(ids[0], None) if ids else None
        if message is None:
            raise MessageError(f"no request {ids[0] if ids else '(no ID)'} awaits a reply "
                               f"from {resident.name}: replies go to requests received, once")
        reply = request.copy()  # lazy folders stay lazy: the place reads none of them
        for name in _REPLY_FOLDERS:
            reply.remove(name)
        if message.answer is not None and not message.answer.done():
            message.answer.set_result(reply)
        return Briefcase()

    def _within_share(self, resident: Resident, principal: str, size: int) -> None:
        """MailboxFull, naming the setting, if one more message of `size` bytes from
        `principal` would pass its share of `resident`'s mailbox."""
        waiting = resident.messages_of[principal]
        if waiting + 1 > self.messages_share:
            what = (f"{waiting} messages waiting for {resident.name}, its most of "
                    f"{self.messages_share} (--share of --mailbox-messages "
                    f"{self.max_messages})")
        elif resident.bytes_of[principal] + size > self.bytes_share:
            what = (f"{resident.bytes_of[principal]:,} bytes of messages waiting for "
                    f"{resident.name}, and {size:,} more would pass its most of "
                    f"{self.bytes_share:,} (--share of --mailbox-bytes {self.max_bytes:,})")
        else:
            return
        raise MailboxFull(f"{principal or 'anonymous'} has {what}: a principal may fill only "
                          f"its share of another's mailbox; try again when {resident.name} "
                          "has taken some")

    def _taken(self, message: Message, resident: Resident) -> None:
        """A message left `resident`'s mailbox: it no longer counts against its sender."""
        _less(self.by_principal, message.principal, message.size)
        _less(resident.messages_of, message.principal, 1)
        _less(resident.bytes_of, message.principal, message.size)

    def leave(self, meet: RunningMeet) -> None:
        """The resident of `meet` ends: free its name, tell everyone still waiting."""
        resident = self.of(meet)
        if resident is None:
            return
        del self.by_name[resident.name]
        meet.resident = None
        self.total_bytes -= resident.bytes
        ended: Exception = MessageError(f"resident agent {resident.name} ended before "
                                        "answering")
        if self.closing:
            ended = PlaceUnavailable(f"resident agent {resident.name} stopped with its place")
        for message in resident.queue:
            self._taken(message, resident)
        for message in [*resident.queue, *resident.unanswered.values()]:
            if message.answer is not None and not message.answer.done():
                message.answer.set_exception(ended)
                message.answer.exception()  # retrieved: nobody may be waiting any more
        resident.queue.clear()
        resident.unanswered.clear()
        if resident.waiter is not None and not resident.waiter.done():
            resident.waiter.cancel()

    def close(self) -> None:
        """The place stops: every receive returns at once with no message, so residents
        that loop on receive end within the grace period."""
        self.closing = True
        for resident in self.by_name.values():
            if resident.waiter is not None and not resident.waiter.done():
                resident.waiter.set_result(None)
