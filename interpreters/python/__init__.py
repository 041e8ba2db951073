"""ag_python: agents written in Python.

The CODE folder holds the program's source. It runs in a fresh worker process with the
briefcase as the global `bc` (a tacoma.Briefcase); whatever `bc` holds when the program ends
is the meet's result. See _worker.py for the rest of the agent API.
"""

import platform
from collections.abc import Callable, Mapping

from tacoma.agent._api import spell
from tacoma.agent._interpreter import InProcess, Interpreter

#: The errors the agent API raises, as the agent's program finds them, to catch.
AGENT_ERRORS = ("MeetError", "UnknownAgent", "AgentFailed", "AgentKilled", "MeetTimeout",
                "PlaceUnavailable", "CabinetError", "MailboxFull", "MessageError",
                "LimitExceeded", "LazyFolderError", "NotAllowed")

def _check_program(program: bytes, name: str) -> str | None:
    try:
        compile(program, name, "exec", dont_inherit=True)
    except SyntaxError as exc:
        return f"{name}, line {exc.lineno}: SyntaxError: {exc.msg}"
    except ValueError as exc:  # NUL bytes, bad encoding
        return f"{name}: {exc}"
    return None


def _trusted_check(program: bytes, name: str) -> str | None:
    from ._trusted import check

    return check(program, name)


def _trusted_load(program: bytes, name: str, given: Mapping[str, object]) -> Callable[..., object]:
    from ._trusted import load

    return load(program, name, given)


interpreter = Interpreter(
    language="python",
    agent="ag_python",
    suffixes=(".py",),
    worker_module="tacoma.interpreters.python._worker",
    version=lambda: f"{platform.python_implementation()} {platform.python_version()}",
    check_program=_check_program,
    in_process=InProcess(check=_trusted_check, load=_trusted_load,
                         null="def meet(bc, principal):\n    return bc\n"),
    programs={
        "minimal": "pass",
        "arriver": 'cabinet_append(bc.text("TAG")[0], "ARRIVED", b".")',
        "roamer": 'bc.append("HOPS", b".")\ngo_next()',
    },
    # The briefcase calls are methods of the agent's `bc`; every other call is a global of
    # its program, the AgentChannel method of the same name. bc.append takes text too, and
    # meet_async is meet(..., mode="async").
    spellings=spell("bc.", append_text="bc.append", meet_async="meet"),
    extras={
        "Briefcase": "the briefcase type, to build briefcases for meets",
        **{name: "an error the agent API raises (tacoma's class), to catch"
           for name in AGENT_ERRORS},
    },
)
