"""The agent API, declared once: every call an agent can make, whatever its language.

This table is the definition of the agent API. A language adapter (interpreters/<lang>/)
binds every call under its own spelling (`append` is `bc.append` in Python, `bc_append` in
Tcl, `bc-append` in Scheme, `tc_append` in C) and declares those spellings in its
`Interpreter` value (`Interpreter.spellings`), together with the helpers that only its own
values need (`Interpreter.extras`: C's briefcase handles and lists, Python's Briefcase class
and error classes). Three things hold every adapter to the table:

- its worker checks, when its zygote starts, that each call has a spelling and that the
  spelling is bound (`check_bound`), so an adapter that misses a call does not start;
- the place warns, when it discovers an adapter, about calls its spellings leave out;
- the conformance suite (tests/test_conformance.py) runs a probe agent in every language
  that reports which spellings its language really binds, so a call missing or misnamed in
  one language fails a test naming the language and the call.

A call is data: its name, its parameters (name, kind of value, optional or not), what it
returns, and the kinds of MeetError it may raise (`wire._errors.KINDS`). How a language
raises them is its own: Python's classes (UnknownAgent, ...), Tcl's errorCode
{TACOMA KIND}, Scheme's (throw 'tacoma KIND MESSAGE), C's return value and tc_error_kind().
Misusing a call (a wrong argument) is a usage error in each language's own terms, not a
MeetError, and is not listed.

Standard library only: every worker imports this (its zygote, once).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from ..wire._errors import (
    KINDS,
    CabinetError,
    LazyFolderError,
    LimitExceeded,
    MailboxFull,
    MeetError,
    MeetTimeout,
    MessageError,
    NotAllowed,
    PlaceUnavailable,
    UnknownAgent,
)

__all__ = ["API", "CALLS", "VALUES", "Call", "Param", "check_bound", "spell", "unbound"]

#: What a parameter takes or a call returns, by kind.
VALUES: dict[str, str] = {
    "nothing": "no value",
    "never": "does not return: the meet ends here, or the agent went on to another place",
    "text": "a string (UTF-8 where it becomes bytes)",
    "texts": "a list of strings",
    "element": "one folder element: bytes (text given is stored as UTF-8)",
    "elements": "a list of folder elements",
    "briefcase": "a briefcase: folders by name, each a list of elements",
    "target": "an agent to meet: `NAME` at this place, `NAME@HOST:PORT` at another",
    "place": "a place's address, HOST:PORT",
    "seconds": "a number of seconds",
    "count": "a whole number of bytes",
    "flag": "true or false",
    "id": "an identifier the place made (of a meet, of a message)",
    "handle": "a handle naming an acknowledged send, for wait_ack",
    "message": "a message as receive returns it: its folders and ENVELOPE (id, kind, sender, "
               "principal)",
    "message or nothing": "a message as receive returns it, or nothing if none came in time",
    "flag or never": "false if there is nowhere to go; else does not return (the agent went)",
}

#: The groups the calls fall in, in the order of the agent API table (docs/reference/agent-api.md).
GROUPS = ("briefcase", "meeting", "the place", "moving", "messages", "cabinets")


@dataclass(frozen=True, slots=True)
class Param:
    """One parameter of a call: its name, the kind of value it takes, and whether it may be
    left out (each language says how: a default, an optional argument, a keyword)."""

    name: str
    kind: str
    optional: bool = False

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"a parameter name must be an identifier, got {self.name!r}")
        if self.kind not in VALUES:
            raise ValueError(f"parameter {self.name}: unknown kind {self.kind!r}; one of "
                             f"{', '.join(VALUES)}")


@dataclass(frozen=True, slots=True)
class Call:
    """One call of the agent API.

    name: its canonical name, the key of every adapter's spellings; group: which part of the
    API (GROUPS); params: what it takes, in order; result: what it returns (a kind of
    VALUES); errors: the MeetError kinds it may raise; doc: what it does, in one line.
    Briefcase calls act on the agent's own briefcase (in C, on any briefcase handle).
    """

    name: str
    group: str
    params: tuple[Param, ...]
    result: str
    errors: tuple[str, ...]
    doc: str

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"a call's name must be an identifier, got {self.name!r}")
        if self.group not in GROUPS:
            raise ValueError(f"{self.name}: unknown group {self.group!r}")
        if self.result not in VALUES:
            raise ValueError(f"{self.name}: unknown result kind {self.result!r}")
        unknown = [kind for kind in self.errors if kind not in KINDS]
        if unknown:
            raise ValueError(f"{self.name}: unknown error kinds {unknown}; see wire._errors")
        names = [p.name for p in self.params]
        if len(set(names)) != len(names):
            raise ValueError(f"{self.name}: a parameter is named twice in {names}")
        optional = [p.optional for p in self.params]
        if optional != sorted(optional):
            raise ValueError(f"{self.name}: a required parameter follows an optional one")


#: Every kind a meet can fail with: the target decides (an agent's failure, a cabinet's
#: refusal, a place's limit...).
_ANY = tuple(KINDS)
#: Where the place cannot take the agent (go) or hand over a message (send).
_MOVE = (UnknownAgent.kind, PlaceUnavailable.kind, LimitExceeded.kind, MeetTimeout.kind,
         MeetError.kind)
_SEND = (UnknownAgent.kind, MailboxFull.kind, MessageError.kind, PlaceUnavailable.kind,
         LimitExceeded.kind)
_CABINET = (CabinetError.kind,)
#: Reading a lazy folder: its origin gone, its data expired, or not this principal's.
_LAZY = (LazyFolderError.kind, NotAllowed.kind)
_NAME = Param("name", "text")
_TARGET = Param("target", "target")
_BRIEFCASE = Param("briefcase", "briefcase", optional=True)
_TIMEOUT = Param("timeout", "seconds", optional=True)
_CABINET_NAME = Param("cabinet", "text")
_FOLDER = Param("folder", "text")
_PRIVATE = Param("private", "flag", optional=True)

#: The agent API, in the order of its table in docs/reference/agent-api.md.
API: tuple[Call, ...] = (
    Call("folders", "briefcase", (), "texts", (), "the names of the briefcase's folders"),
    Call("folder", "briefcase", (_NAME,), "elements", _LAZY,
         "a folder's elements (none if there is no such folder); a lazy one's are fetched"),
    Call("text", "briefcase", (_NAME,), "texts", _LAZY,
         "a folder's elements decoded from UTF-8"),
    Call("append", "briefcase", (_NAME, Param("element", "element")), "nothing", (),
         "append an element to a folder, making the folder if needed"),
    Call("append_text", "briefcase", (_NAME, Param("text", "text")), "nothing", (),
         "append text to a folder, stored as UTF-8"),
    Call("replace", "briefcase", (_NAME, Param("elements", "elements")), "nothing", (),
         "replace a folder's elements"),
    Call("remove", "briefcase", (_NAME,), "nothing", (), "remove a folder"),
    Call("read", "briefcase", (_NAME, Param("offset", "count"),
                               Param("length", "count", optional=True)), "element", _LAZY,
         "bytes of a folder's elements joined, from offset (all the rest unless length is "
         "given); of a lazy folder only the chunks they are in are fetched"),
    Call("folder_size", "briefcase", (_NAME,), "count", (),
         "the bytes a folder's elements hold (a lazy folder's, without fetching it)"),
    Call("lazy", "briefcase", (_NAME,), "nothing", (LimitExceeded.kind, LazyFolderError.kind),
         "make a folder travel by reference: the place keeps its data, and the meets that "
         "carry it fetch only what their agents read"),
    Call("meet", "meeting", (_TARGET, _BRIEFCASE, _TIMEOUT), "briefcase", _ANY,
         "meet another agent and wait for it: the briefcase it ended with"),
    Call("meet_async", "meeting", (_TARGET, _BRIEFCASE, _TIMEOUT), "id", _ANY,
         "start a meet with another agent and go on: its meet id, once the place took it"),
    Call("log", "the place", (Param("message", "text"), Param("level", "text", optional=True)),
         "nothing", (), "write a line to the place's log (level: info unless given)"),
    Call("fail", "the place", (Param("message", "text"),), "never", (),
         "end the meet as failed (AgentFailed) with this message and no trace"),
    Call("place", "the place", (), "place", (), "the address of the place the agent runs at"),
    Call("principal", "the place", (), "text", (),
         "the name of the identity that launched the meet (a moving agent's trip), as the "
         "place authenticated its certificate; empty where the place authenticates nobody"),
    Call("go", "moving", (Param("place", "place"),), "never", _MOVE,
         "move to a place with the briefcase: the program ends here and starts there; if "
         "that place cannot take the agent, raises its error and the agent stays"),
    Call("go_next", "moving", (), "flag or never", _MOVE,
         "go to the first place of the ITINERARY folder, taken off it; false if it is empty"),
    Call("reside", "messages", (_NAME,), "nothing", ("message",),
         "stay at this place as the resident agent NAME: meets with NAME@place are messages"),
    Call("receive", "messages", (_TIMEOUT,), "message or nothing", ("message",),
         "the next message, waiting up to timeout seconds (no timeout: as long as the meet)"),
    Call("reply", "messages", (Param("message", "message"), _BRIEFCASE), "nothing",
         ("message",), "answer a request (a message of kind request) with a briefcase"),
    Call("send", "messages", (_TARGET, _BRIEFCASE), "id", _SEND,
         "a one-way message to the resident NAME@HOST:PORT: its id once it is in the mailbox"),
    Call("send_ack", "messages", (_TARGET, _BRIEFCASE), "handle", _SEND,
         "a message whose acknowledgement comes later: a handle for wait_ack"),
    Call("wait_ack", "messages", (Param("handle", "handle"), _TIMEOUT), "nothing",
         (*_SEND, MeetTimeout.kind), "wait until a message of send_ack was taken by its resident"),
    Call("request", "messages", (_TARGET, _BRIEFCASE, _TIMEOUT), "briefcase", _ANY,
         "send a request to a resident agent and wait for its reply"),
    Call("cabinet_read", "cabinets", (_CABINET_NAME, _FOLDER), "elements", _CABINET,
         "a folder of a cabinet at this place (none if it has no such folder)"),
    Call("cabinet_append", "cabinets", (_CABINET_NAME, _FOLDER, Param("element", "element"),
                                        _PRIVATE), "nothing", _CABINET,
         "append to a cabinet's folder, making the cabinet (private: this agent's alone)"),
    Call("cabinet_replace", "cabinets", (_CABINET_NAME, _FOLDER, Param("elements", "elements"),
                                         _PRIVATE), "nothing", _CABINET,
         "replace a cabinet's folder, making the cabinet (private: this agent's alone)"),
    Call("cabinet_remove", "cabinets", (_CABINET_NAME, Param("folder", "text", optional=True)),
         "nothing", _CABINET, "remove a folder of a cabinet, or (no folder) the cabinet"),
    Call("cabinet_folders", "cabinets", (_CABINET_NAME,), "texts", _CABINET,
         "the names of a cabinet's folders"),
    Call("cabinets", "cabinets", (), "texts", _CABINET,
         "the cabinets at this place this agent may use"),
)

#: The calls by name.
CALLS: Mapping[str, Call] = {call.name: call for call in API}
assert len(CALLS) == len(API), "two calls of the agent API have the same name"


def spell(briefcase: str, prefix: str = "", separator: str = "_",
          **exceptions: str) -> dict[str, str]:
    """A language's spellings of the whole API, by its rule and its exceptions.

    The rule: a briefcase call is `briefcase` then its name, any other call `prefix` then its
    name, the words of a name joined by `separator` (`spell("bc-", separator="-")` spells
    go_next `go-next` and append `bc-append`); `exceptions` spell the calls the rule does
    not (`log="place-log"`). Several calls may share a spelling where the language makes
    them one call with an option (`meet_async="meet"`).
    """
    unknown = sorted(set(exceptions) - set(CALLS))
    if unknown:
        raise ValueError(f"no calls of the agent API: {', '.join(unknown)}")
    return {call.name: exceptions.get(call.name) or
            (briefcase if call.group == "briefcase" else prefix) + call.name.replace("_", separator)
            for call in API}


def unbound(spellings: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """What a language's `spellings` gets wrong: the calls it leaves out, and the names it
    spells that are no call of the API (a typo, or a call the table lacks)."""
    missing = [call.name for call in API if not spellings.get(call.name)]
    extra = sorted(name for name in spellings if name not in CALLS)
    return missing, extra


def check_bound(language: str, spellings: Mapping[str, str], defined: Collection[str],
                extras: Collection[str] = ()) -> None:
    """Raise LookupError unless the binding of `language` is the whole agent API and no more.

    `defined` is what the binding defines for agents (its own helpers left out): each call
    must have a spelling, each spelling and each of its `extras` must be among `defined`,
    and each name of `defined` must be a spelling or an extra, so that a call one language
    has and the table lacks is caught too. Each adapter's worker calls this once, when its
    zygote starts (off every meet's path).
    """
    missing, extra = unbound(spellings)
    problems = []
    if missing:
        problems.append(f"no spelling for {', '.join(missing)}")
    if extra:
        problems.append(f"spellings of no call of the API: {', '.join(extra)}")
    undefined = [f"{name} ({spellings[name]})" for name in CALLS
                 if spellings.get(name) and spellings[name] not in defined]
    undefined += [name for name in extras if name not in defined]
    if undefined:
        problems.append(f"declared but not bound: {', '.join(undefined)}")
    unknown = sorted(set(defined) - set(spellings.values()) - set(extras))
    if unknown:
        problems.append(f"bound but neither a call nor an extra: {', '.join(unknown)}")
    if problems:
        raise LookupError(f"the {language} adapter does not bind the agent API "
                          f"(tacoma/agent/_api.py) as it declares: {'; '.join(problems)}")
