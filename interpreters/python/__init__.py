"""ag_python: agents written in Python.

The CODE folder holds the program's source. It runs in a fresh worker process with the
briefcase as the global `bc` (a tacoma.Briefcase); whatever `bc` holds when the program ends
is the meet's result. See _worker.py for the rest of the agent API.
"""

import platform

from tacoma.agent._interpreter import Interpreter

interpreter = Interpreter(
    language="python",
    agent="ag_python",
    suffixes=(".py",),
    worker_module="tacoma.interpreters.python._worker",
    version=lambda: f"{platform.python_implementation()} {platform.python_version()}",
    programs={
        "minimal": "pass",
        "arriver": 'cabinet_append(bc.text("TAG")[0], "ARRIVED", b".")',
        "roamer": 'bc.append("HOPS", b".")\ngo_next()',
    },
)
