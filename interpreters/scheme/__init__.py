"""ag_scheme: agents written in Scheme, run by GNU Guile 3.0 embedded through libguile.

The CODE folder holds Scheme source. It runs in a fresh worker process, in a Guile started
before the meet arrived (cffi bindings to libguile, see _guile.py), with the agent API as
Scheme procedures (see _worker.py). Folder elements are bytevectors.
"""

from tacoma.agent._api import spell
from tacoma.agent._interpreter import Interpreter

INSTALL_HINT = ("install GNU Guile 3.0 (Debian: apt-get install guile-3.0); ag_scheme loads "
                "libguile-3.0.so.1 through cffi")


def _check() -> str | None:
    from ._guile import load

    try:
        load()
    except OSError as exc:
        return f"libguile is missing ({exc}); {INSTALL_HINT}"
    return None


def _version() -> str:
    import shutil
    import subprocess

    guile = shutil.which("guile")
    if guile is None:
        return "GNU Guile (libguile; no guile command to ask its version)"
    out = subprocess.run([guile, "--version"], capture_output=True, text=True, timeout=10,  # noqa: S603 - a fixed command
                         check=False)
    first = out.stdout.splitlines()[0] if out.stdout else ""
    return first.replace("guile (GNU Guile)", "GNU Guile").strip() or "GNU Guile (libguile)"


#: Reads every form of the program on stdin, from a port named after its file: a reader's
#: error (an unclosed paren, a bad token) is printed as Guile words it, with file and line.
_READ_ALL = """
(set-port-filename! (current-input-port) (cadr (command-line)))
(catch 'read-error
  (lambda () (let loop () (unless (eof-object? (read)) (loop))))
  (lambda (key . args) (print-exception (current-output-port) #f key args) (exit 1)))
"""


def _check_program(program: bytes, name: str) -> str | None:
    """Read (not run) every form, with the guile command; None if there is none to ask."""
    import shutil
    import subprocess

    guile = shutil.which("guile")
    if guile is None:
        return None
    try:
        out = subprocess.run([guile, "--no-auto-compile", "-c", _READ_ALL, name],  # noqa: S603 - a fixed command
                             input=program, capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode == 0:
        return None
    text = out.stdout.decode("utf-8", "replace").strip() or \
        out.stderr.decode("utf-8", "replace").strip()
    return text.splitlines()[-1] if text else f"{name}: Guile cannot read it"


interpreter = Interpreter(
    language="scheme",
    agent="ag_scheme",
    suffixes=(".scm",),
    worker_module="tacoma.interpreters.scheme._worker",
    check=_check,
    version=_version,
    check_program=_check_program,
    programs={
        "minimal": "#t",
        "arriver": '(cabinet-append (car (bc-text "TAG")) "ARRIVED" ".")',
        "roamer": '(bc-append "HOPS" ".")\n(go-next)',
    },
    # Procedures of the prelude in _worker.py; bc-append takes strings too (append_text),
    # meet_async is `(meet ... #:async #t)`, and log is place-log (log is the logarithm).
    spellings=spell("bc-", separator="-", append_text="bc-append", meet_async="meet",
                    log="place-log"),
)
