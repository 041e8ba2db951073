"""The ag_tcl worker: runs one Tcl agent in the Tcl interpreter that ships with tkinter.

Run by the place as this language's zygote (tacoma/agent/_zygote.py). Each forked worker creates
its Tcl interpreter in `prepare`, before it says it is ready, so a meet costs only
evaluating the agent's script; a warm worker makes a new one after each meet (`reset`).

The agent API (tacoma/agent/_api.py), as Tcl procs, spelled as __init__.py declares (the Tcl
column of the agent API table, docs/reference/agent-api.md); which procs the prelude
defines is checked against that table when the zygote starts:
    bc_folders                      the folder names
    bc_folder NAME                  the folder's elements, a list of byte arrays
    bc_text NAME                    the folder's elements decoded from UTF-8
    bc_append NAME BYTES            append a byte array
    bc_append_text NAME TEXT        append TEXT encoded as UTF-8
    bc_replace NAME LIST            replace the folder's elements
    bc_remove NAME                  remove the folder
    bc_read NAME OFFSET ?LENGTH?    bytes of the folder's elements joined (a lazy folder's
                                    chunks fetched as needed)
    bc_folder_size NAME             the bytes the folder holds (a lazy one's, unfetched)
    bc_lazy NAME                    make the folder travel by reference (wire/_lazy.py)
    meet TARGET ?BRIEFCASE? ?-async? ?-timeout SECONDS?
                                    meet another agent; BRIEFCASE is a dict of folder name
                                    to list of byte arrays; returns such a dict (sync) or
                                    the meet id (async); a failure is a Tcl error whose
                                    errorCode is {TACOMA KIND}
    log MESSAGE ?LEVEL?             a line in the place's log
    fail MESSAGE                    end the meet as failed
    place                           the address of this place
    principal                       who launched the meet (a moving agent's trip), as the
                                    place authenticated them; "" where it authenticates nobody
    cabinet_read CABINET FOLDER     a cabinet's folder (byte arrays)
    cabinet_append CABINET FOLDER BYTES ?-private?
    cabinet_replace CABINET FOLDER LIST ?-private?
    cabinet_remove CABINET ?FOLDER?
    cabinet_folders CABINET         the place's cabinets (see tacoma/place/_cabinets.py)
    cabinets
    go PLACE                        move to PLACE with the briefcase: the script ends here
                                    and starts again there (tacoma/place/_trips.py)
    go_next                         go to the first place of ITINERARY, taken off it;
                                    returns 0 if the itinerary is empty
    reside NAME                     stay here as resident agent NAME (tacoma/place/_residents.py)
    receive ?SECONDS?               the next message, a briefcase dict with ENVELOPE
                                    {id kind sender principal}; an empty dict if none
                                    came in time
    reply MESSAGE ?BRIEFCASE?       answer a request
    send TARGET ?BRIEFCASE?         one-way message to NAME@PLACE; returns its id
    send_ack TARGET ?BRIEFCASE?     acknowledged message; returns a handle for wait_ack
    wait_ack HANDLE ?SECONDS?       wait until the message was taken
    request TARGET ?BRIEFCASE? ?-timeout SECONDS?
                                    a request; returns the reply

Elements are byte arrays: bytes cross between Tcl and Python unchanged. Text must be made
bytes on purpose (`bc_append_text`, or `encoding convertto utf-8`); an element with
characters beyond a byte is refused with an error that says so. Why a dispatcher plus Tcl
procs: tkinter turns an exception raised in a Python command into an empty Tcl error, so the
Python side returns {ok RESULT} or {error MESSAGE CODE} and the procs raise proper errors.
The dispatcher's operations (`OPS`) are calls of the agent API, named as in its table.
"""

from __future__ import annotations

import tkinter
from collections.abc import Callable

from tacoma.agent import _zygote as zygote
from tacoma.agent._api import CALLS, check_bound
from tacoma.agent._channel import AgentChannel, AgentFailure, program_text
from tacoma.wire._briefcase import Briefcase
from tacoma.wire._errors import MeetError
from tacoma.wire._program import program_name
from tacoma.wire._protocol import Meet

from . import interpreter

PRELUDE = r"""
proc _tacoma_call {args} {
    set answer [_tacoma {*}$args]
    if {[lindex $answer 0] eq "ok"} { return [lindex $answer 1] }
    return -code error -errorcode [list TACOMA [lindex $answer 2]] [lindex $answer 1]
}
proc bc_folders {} { _tacoma_call folders }
proc bc_folder {name} { _tacoma_call folder $name }
proc bc_text {name} {
    set out {}
    foreach e [_tacoma_call folder $name] { lappend out [encoding convertfrom utf-8 $e] }
    return $out
}
proc bc_append {name bytes} { _tacoma_call append $name $bytes }
proc bc_append_text {name text} { _tacoma_call append $name [encoding convertto utf-8 $text] }
proc bc_replace {name elements} { _tacoma_call replace $name {*}$elements }
proc bc_remove {name} { _tacoma_call remove $name }
proc bc_read {name offset {length -1}} { _tacoma_call read $name $offset $length }
proc bc_folder_size {name} { _tacoma_call folder_size $name }
proc bc_lazy {name} { _tacoma_call lazy $name }
proc meet {target args} {
    # The briefcase crosses as separate arguments (name, count, elements...): one Tcl
    # string holding binary elements with NUL bytes could not cross to Python whole.
    set options {}
    set briefcase {}
    while {[llength $args]} {
        set args [lassign $args arg]
        switch -- $arg {
            -async { lappend options -async }
            -ack { lappend options -ack }
            -timeout { set args [lassign $args seconds]; lappend options -timeout $seconds }
            default { set briefcase $arg }
        }
    }
    set flat {}
    dict for {name elements} $briefcase {
        lappend flat $name [llength $elements] {*}$elements
    }
    _tacoma_call meet $target {*}$options -- {*}$flat
}
proc log {message {level info}} { _tacoma_call log $message $level }
proc fail {message} { _tacoma_call fail $message }
proc place {} { _tacoma_call place }
proc principal {} { _tacoma_call principal }
proc _cabinet {op cabinet args} {
    meet ag_cabinet [dict create OP $op CABINET $cabinet {*}$args]
}
proc _cabinet_write {op cabinet folder elements flags} {
    set request [list $folder $elements]
    if {"-private" in $flags} { lappend request PRIVATE [list 1] }
    _cabinet $op $cabinet {*}$request
    return
}
proc cabinet_read {cabinet folder} {
    set r [_cabinet read $cabinet FOLDER [list $folder]]
    if {[dict exists $r $folder]} { return [dict get $r $folder] }
    return {}
}
proc cabinet_append {cabinet folder bytes args} {
    _cabinet_write append $cabinet $folder [list $bytes] $args
}
proc cabinet_replace {cabinet folder elements args} {
    _cabinet_write replace $cabinet $folder $elements $args
}
proc cabinet_remove {cabinet {folder ""}} {
    if {$folder eq ""} { _cabinet remove $cabinet } else {
        _cabinet remove $cabinet FOLDER [list $folder] }
    return
}
proc cabinet_folders {cabinet} { dict get [_cabinet folders $cabinet] FOLDERS }
proc cabinets {} { dict get [meet ag_cabinet [dict create OP list]] CABINETS }
# go and go_next do not return once the agent went: the process ends (see AgentChannel).
proc _tacoma_flush {} { catch {flush stdout}; catch {flush stderr} }
proc go {place} { _tacoma_flush; _tacoma_call go $place }
proc go_next {} { _tacoma_flush; _tacoma_call go_next }
proc reside {name} { meet ag_mailbox [dict create OP reside NAME [list $name]]; return }
proc receive {{seconds ""}} {
    set request [dict create OP receive]
    if {$seconds ne ""} { dict set request TIMEOUT [list $seconds] }
    set message [meet ag_mailbox $request]
    if {![dict exists $message ENVELOPE]} { return {} }
    return $message
}
proc reply {message {briefcase {}}} {
    dict set briefcase OP [list reply]
    dict set briefcase ID [list [lindex [dict get $message ENVELOPE] 0]]
    meet ag_mailbox $briefcase
    return
}
proc send {target {briefcase {}}} { meet $target $briefcase -async }
proc send_ack {target {briefcase {}}} { meet $target $briefcase -ack }
proc wait_ack {handle {seconds ""}} { _tacoma_call wait_ack $handle $seconds }
proc request {target {briefcase {}} args} { meet $target $briefcase {*}$args }
"""

#: The procs the prelude defines for agents (its own helpers, named _..., left out).
PROCS = frozenset(line.split()[1] for line in PRELUDE.splitlines()
                  if line.startswith("proc ") and not line.startswith("proc _"))
check_bound(interpreter.language, interpreter.spellings, PROCS, interpreter.extras)

_tcl: tkinter.Tk | None = None


def prepare() -> None:
    """Start this worker's Tcl interpreter and define the agent API (before the meet)."""
    global _tcl
    tcl = tkinter.Tcl()
    tcl.eval(PRELUDE)
    _tcl = tcl


def reset() -> None:
    """A new Tcl interpreter for a warm worker's next meet (the last one deleted): no proc,
    variable or namespace of an earlier meet is left (made after the reply, off the next
    meet's path)."""
    global _tcl
    _tcl = None  # its last reference: tkinter deletes the interpreter
    prepare()


class _Failed(Exception):
    """The agent called fail."""


def _bytes(value: str, what: str) -> bytes:
    try:
        return value.encode("latin-1")  # a byte array's characters are its bytes
    except UnicodeEncodeError:
        raise ValueError(f"{what} is text, not bytes: use bc_append_text, or "
                         "[encoding convertto utf-8 ...]") from None


def _tcl_briefcase(value: Briefcase) -> tuple[object, ...]:
    """A briefcase as Tcl takes it: a dict of folder names to lists of byte arrays."""
    flat: list[object] = []
    for name, folder in value.items():
        flat += [name, tuple(folder)]
    return tuple(flat)


class _Calls:
    """What the prelude's procs call, for one meet: `_tacoma OP ARGS...` runs OPS[OP]."""

    def __init__(self, bc: Briefcase, channel: AgentChannel) -> None:
        self.bc = bc
        self.channel = channel
        self.failure: str | None = None

    def folders(self) -> object:
        return tuple(self.bc.folders())

    def folder(self, name: str) -> object:
        return tuple(self.bc.folder(name))

    def append(self, name: str, element: str) -> object:
        self.bc.append(name, _bytes(element, f"the element for folder {name}"))
        return ""

    def replace(self, name: str, *elements: str) -> object:
        self.bc.replace(name, [_bytes(str(e), f"an element for folder {name}")
                               for e in elements])
        return ""

    def remove(self, name: str) -> object:
        self.bc.remove(name)
        return ""

    def read(self, name: str, offset: str, length: str) -> object:
        size = int(length)
        return self.bc.read(name, int(offset), None if size < 0 else size)

    def folder_size(self, name: str) -> object:
        return self.bc.folder_size(name)

    def lazy(self, name: str) -> object:
        try:
            self.bc.lazy(name)
        except KeyError as exc:
            raise ValueError(exc.args[0]) from None
        return ""

    def meet(self, target: str, *args: str) -> object:
        """meet, meet_async, send_ack: the options and the flattened briefcase the meet
        proc sends (name, count, elements..., after --)."""
        briefcase, mode, timeout = Briefcase(), "sync", None
        rest = [str(a) for a in args]
        while rest:
            arg = rest.pop(0)
            if arg == "-async":
                mode = "async"
            elif arg == "-ack":
                mode = "ack"
            elif arg == "-timeout" and rest:
                timeout = float(rest.pop(0))
            elif arg == "--":
                break
        while rest:  # name, count, elements..., as the meet proc flattened the dict
            name, count = rest.pop(0), int(rest.pop(0))
            elements, rest = rest[:count], rest[count:]
            briefcase.replace(name, [_bytes(e, f"an element of folder {name}")
                                     for e in elements])
        if mode == "ack":
            return self.channel.send_ack(target, briefcase)
        answer = self.channel.meet(target, briefcase, mode, timeout)
        return answer if isinstance(answer, str) else _tcl_briefcase(answer)

    def log(self, message: str, level: str = "info") -> object:
        self.channel.log(message, level)
        return ""

    def fail(self, message: str) -> object:
        self.failure = message
        raise _Failed(message)

    def place(self) -> object:
        return self.channel.place

    def principal(self) -> object:
        return self.channel.principal

    def go(self, place: str) -> object:
        self.channel.go(place, self.bc)
        return ""

    def go_next(self) -> object:
        return int(self.channel.go_next(self.bc))

    def wait_ack(self, handle: str, seconds: str = "") -> object:
        self.channel.wait_ack(int(handle), float(seconds) if seconds else None)
        return ""


#: The operations of `_tacoma`, by the call of the agent API each serves.
OPS: dict[str, Callable[..., object]] = {
    name: getattr(_Calls, name) for name in ("folders", "folder", "append", "replace", "remove",
                                             "read", "folder_size", "lazy", "meet", "log",
                                             "fail", "place", "principal", "go", "go_next",
                                             "wait_ack")
}
assert set(OPS) <= set(CALLS), f"not calls of the agent API: {set(OPS) - set(CALLS)}"


def run(meet: Meet, channel: AgentChannel) -> Briefcase:
    if _tcl is None:
        prepare()
    tcl = _tcl
    assert tcl is not None
    script = program_text(meet, "Tcl")
    calls = _Calls(meet.briefcase, channel)

    def dispatch(op: str, *args: str) -> tuple[object, ...]:
        call = OPS.get(op)
        if call is None:
            return ("error", f"unknown tacoma operation {op}", "USAGE")
        try:
            return ("ok", call(calls, *args))
        except _Failed as exc:
            return ("error", str(exc), "FAIL")
        except MeetError as exc:
            return ("error", f"{type(exc).__name__.lstrip('_')}: {exc}", exc.kind)
        except (ValueError, TypeError, IndexError) as exc:
            return ("error", str(exc), "USAGE")

    tcl.createcommand("_tacoma", dispatch)
    # Through uplevel, whose errorInfo says the error's line in the script (a plain eval's
    # does not); at level #0, as a plain eval would run it.
    tcl.setvar("::_tacoma_script", script)
    failed = tcl.eval("catch {uplevel #0 $::_tacoma_script} ::_tacoma_message ::_tacoma_opts")
    tcl.eval("unset ::_tacoma_script")
    if str(failed) == "1":
        if calls.failure is not None:
            raise AgentFailure(calls.failure) from None
        name = program_name(meet.briefcase)
        info = str(tcl.eval("dict get $::_tacoma_opts -errorinfo"))
        # The last frames are this catch's own: the agent's file and line say where instead.
        info, found, rest = info.rpartition('\n    ("uplevel" body line ')
        line = rest.partition(")")[0] if found else "?"
        raise AgentFailure(f"Tcl error: {tcl.getvar('::_tacoma_message')} ({name}, line "
                           f"{line})", f'{info}\n    (file "{name}" line {line})') from None
    return meet.briefcase


if __name__ == "__main__":
    zygote.main(run, prepare=prepare, reset=reset)
