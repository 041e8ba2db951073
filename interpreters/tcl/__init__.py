"""ag_tcl: agents written in Tcl, run by the Tcl interpreter that ships with Python's tkinter.

The CODE folder holds a Tcl script. It runs in a fresh worker process, in a Tcl interpreter
created before the meet arrived, with the agent API as Tcl commands (see _worker.py).
Folder elements are Tcl byte arrays, never re-encoded text.
"""

from tacoma.agent._api import spell
from tacoma.agent._interpreter import Interpreter


def _check() -> str | None:
    try:
        import tkinter

        tkinter.Tcl()
    except Exception as exc:  # noqa: BLE001 - ImportError, or tkinter's TclError
        return (f"Python's tkinter cannot start Tcl ({exc}); install Tcl/Tk and a Python "
                "built with tkinter (Debian: apt-get install python3-tk tcl)")
    return None


def _version() -> str:
    import tkinter

    return f"Tcl {tkinter.Tcl().eval('info patchlevel')}"


def _check_program(program: bytes, name: str) -> str | None:
    """Tcl has no syntax to check beyond its words: a script is wrong before it runs only
    when it is incomplete (an open brace, bracket or quote), which `info complete` tells."""
    import tkinter

    try:
        script = program.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"{name}: not UTF-8 text ({exc})"
    tcl = tkinter.Tcl()
    tcl.setvar("script", script)
    if tcl.eval("info complete $script") == "1":
        return None
    # The first line from which the rest of the script no longer closes.
    lines = script.splitlines(keepends=True)
    for i in range(len(lines)):
        tcl.setvar("script", "".join(lines[: i + 1]))
        if tcl.eval("info complete $script") != "1":
            tcl.setvar("script", "".join(lines[i:]))
            if tcl.eval("info complete $script") != "1":
                return (f"{name}, line {i + 1}: an open brace, bracket or quote is never "
                        "closed")
    return f"{name}: an open brace, bracket or quote is never closed"


interpreter = Interpreter(
    language="tcl",
    agent="ag_tcl",
    suffixes=(".tcl",),
    worker_module="tacoma.interpreters.tcl._worker",
    check=_check,
    version=_version,
    check_program=_check_program,
    programs={
        "minimal": "set x 1",
        "arriver": "cabinet_append [lindex [bc_text TAG] 0] ARRIVED .",
        "roamer": "bc_append HOPS .\ngo_next",
    },
    # Procs of the prelude in _worker.py; meet_async is `meet ... -async`.
    spellings=spell("bc_", meet_async="meet"),
)
