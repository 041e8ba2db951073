"""The ag_python worker process: runs a Python agent (a warm one, later meets of it too).

Run by the place as this language's zygote (tacoma/agent/_zygote.py), which forks one worker per
meet ahead of time: by the time a meet arrives the interpreter is up, msgpack imported, the
code paths warmed and the sandbox entered, so the meet costs only compiling and running
the agent's program. Each meet gets a new globals dict; a warm worker (`tacoma.agent._reuse`)
keeps the compiled program for its next meets, which can only be of the same program.

The program sees the agent API (tacoma/agent/_api.py) as Python spells it (the spellings in
__init__.py): the briefcase calls are methods of `bc`, the others are globals, each the
AgentChannel method of the same name. Which names the namespace gets is derived from those
spellings once, when the zygote starts, and checked then against the table:
    bc          the briefcase (tacoma.Briefcase): bc["NAME"] is folder NAME's list of bytes
    meet        meet(target, briefcase=None, mode="sync", timeout=None) -> Briefcase | str
    log         log(message, level="info"): a line in the place's log
    fail        fail(message): end the meet as failed with this message
    place       the address of the place the agent runs at
    principal   who launched the meet (a moving agent's trip), as the place authenticated
                them: the name in their certificate; "" at a place that authenticates nobody
    Briefcase   the briefcase type, to build briefcases for meets
    cabinet_read(cabinet, folder), cabinet_append(cabinet, folder, *elements, private=False),
    cabinet_replace(cabinet, folder, elements, private=False),
    cabinet_remove(cabinet, folder=None), cabinet_folders(cabinet), cabinets()
                the place's cabinets (see tacoma/place/_cabinets.py)
    MeetError, UnknownAgent, PlaceUnavailable, MailboxFull, ...
                the errors these raise (tacoma's classes), to catch
    go(place)   move to `place` with `bc`: the program ends here and starts again there
    go_next()   take the first place off bc["ITINERARY"] and go there; False if it is empty
                (see tacoma/place/_trips.py: a failed go raises the place's error, agent stays)
    reside(name), receive(timeout=None), reply(message, briefcase=None)
                stay here as a resident agent and take messages (tacoma/place/_residents.py)
    send(target, briefcase=None) -> message id, send_ack(target, briefcase=None) -> handle,
    wait_ack(handle, timeout=None), request(target, briefcase=None, timeout=None)
                messages to resident agents NAME@PLACE: one-way, acknowledged, request
Whatever `bc` holds when the program ends is the meet's result.
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Mapping

from tacoma.agent import _zygote as zygote
from tacoma.agent._api import check_bound
from tacoma.agent._channel import AgentChannel, AgentFailure, program_text
from tacoma.wire import _errors
from tacoma.wire._briefcase import Briefcase
from tacoma.wire._program import program_name
from tacoma.wire._protocol import Meet

from . import interpreter

# typing costs a worker ~9 ms to import; annotations are strings (PEP 563) anyway.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_SPELLINGS = interpreter.spellings
#: go and go_next take the briefcase the agent holds when it moves: bound in `run`.
_GO, _GO_NEXT = _SPELLINGS["go"], _SPELLINGS["go_next"]
#: The agent's globals that are the channel's own methods (and its `place` and `principal`,
#: strings), by the same names.
_FROM_CHANNEL = tuple(sorted({name for name in _SPELLINGS.values()
                              if not name.startswith("bc.")} - {_GO, _GO_NEXT}))
#: The names Python adds for its own values: the Briefcase type and the error classes.
_EXTRAS: dict[str, object] = {
    name: value for name in interpreter.extras
    if (value := Briefcase if name == "Briefcase" else getattr(_errors, name, None))
}
check_bound(interpreter.language, _SPELLINGS, {
    *(name for name in _SPELLINGS.values()
      if name.startswith("bc.") and callable(getattr(Briefcase, name[3:], None))),
    *(name for name in _FROM_CHANNEL if hasattr(AgentChannel, name)),
    _GO, _GO_NEXT, *_EXTRAS,
}, interpreter.extras)


def _format(exc: BaseException, source: str, filename: str, skip_frames: int) -> str:
    """The agent's traceback, showing its own source lines (imported only on failure)."""
    import linecache
    import traceback

    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    tb = exc.__traceback__
    for _ in range(skip_frames):
        tb = tb.tb_next if tb is not None else None
    return "".join(traceback.format_exception(type(exc), exc, tb))


#: The last program compiled, by its source and file name: a warm worker serves one
#: program only, and compiles it once (each meet still gets new globals).
_compiled: tuple[str, str, Any] | None = None


def _compile(source: str, filename: str) -> Any:
    global _compiled
    if _compiled is not None and _compiled[0] == source and _compiled[1] == filename:
        return _compiled[2]
    try:
        code = compile(source, filename, "exec")
    except SyntaxError as exc:
        raise AgentFailure(f"SyntaxError: {exc.msg} ({filename}, line {exc.lineno})",
                           _format(exc, source, filename, skip_frames=1)) from None
    _compiled = (source, filename, code)
    return code


def run(meet: Meet, channel: AgentChannel) -> Briefcase:
    started = time.perf_counter_ns() if channel.trace is not None else 0
    source = program_text(meet, "Python")
    filename = program_name(meet.briefcase)  # "hello.py": errors name the agent's own file
    code = _compile(source, filename)
    if channel.trace is not None:  # a traced meet: compiling is this language's start
        channel.trace.append(("start", time.perf_counter_ns() - started))

    def briefcase() -> Briefcase:
        return _result(namespace.get("bc"))

    def go(place: str) -> None:
        channel.go(place, briefcase())  # does not return if it went

    def go_next() -> bool:
        return channel.go_next(briefcase())  # does not return if it went

    namespace: dict[str, Any] = {
        "__name__": "__agent__",
        "__builtins__": builtins,
        "bc": meet.briefcase,
        **_EXTRAS,
        **{name: getattr(channel, name) for name in _FROM_CHANNEL},
        _GO: go,
        _GO_NEXT: go_next,
    }
    try:
        exec(code, namespace)  # noqa: S102 - running the agent is this process's whole job
    except AgentFailure:
        raise
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise AgentFailure(f"agent exited with status {exc.code}") from None
    except BaseException as exc:  # noqa: BLE001 - every agent error is reported, none is fatal
        raise AgentFailure(f"{type(exc).__name__}: {exc}",
                           _format(exc, source, filename, skip_frames=1)) from None
    return _result(namespace.get("bc"))


def _result(bc: object) -> Briefcase:
    if isinstance(bc, Briefcase):
        return bc
    if isinstance(bc, Mapping):
        try:
            return Briefcase(bc)
        except (TypeError, ValueError) as exc:
            raise AgentFailure(f"the agent's bc is not a valid briefcase: {exc}") from None
    raise AgentFailure(f"the agent's bc must be a briefcase when it ends, "
                       f"found {type(bc).__name__}")


#: Run once before the worker is ready, so the first real meet finds warm code paths.
WARM_UP = Meet(0, "ag_python", Briefcase(CODE=[b"bc['W'] = [bytes(len(bc['CODE']))]"]))

if __name__ == "__main__":
    zygote.main(run, WARM_UP)
