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


interpreter = Interpreter(
    language="tcl",
    agent="ag_tcl",
    suffixes=(".tcl",),
    worker_module="tacoma.interpreters.tcl._worker",
    check=_check,
    version=_version,
    programs={
        "minimal": "set x 1",
        "arriver": "cabinet_append [lindex [bc_text TAG] 0] ARRIVED .",
        "roamer": "bc_append HOPS .\ngo_next",
    },
    # Procs of the prelude in _worker.py; meet_async is `meet ... -async`.
    spellings=spell("bc_", meet_async="meet"),
)
