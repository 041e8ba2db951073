"""ag_c: agents written in C, compiled by the system's cc and cached by content hash.

The CODE folder holds one C source file that includes <tacoma.h> (include/tacoma.h, put on
the compiler's include path here). The place compiles it once, confined like an agent, into
its cache (tacoma/place/_builds.py); each meet then runs the cached binary as a child of a
pre-started worker, which holds the briefcases and answers the binary's agent API calls
(see _worker.py).
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess

from tacoma.agent._api import spell
from tacoma.agent._interpreter import Build, Interpreter

INCLUDE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "include")
#: -g and frame pointers: a crash's backtrace names the agent's functions and lines.
FLAGS = ("-std=gnu17", "-O2", "-g", "-fno-omit-frame-pointer", "-Wall")
LIBS = ("-lm",)
INSTALL_HINT = "install a C compiler (Debian: apt-get install gcc libc6-dev)"


def _compiler() -> str | None:
    return shutil.which("cc") or shutil.which("gcc")


def _check() -> str | None:
    if _compiler() is None:
        return f"no C compiler (cc) on PATH; {INSTALL_HINT}"
    if not os.path.isfile(os.path.join(INCLUDE, "tacoma.h")):
        return f"tacoma.h is missing from {INCLUDE}; reinstall tacoma"
    return None


@functools.cache
def _version() -> str:
    cc = _compiler()
    return compiler_version(cc) if cc is not None else ""


def compiler_version(compiler: str) -> str:
    """The first line of what `compiler --version` says (its name, if it says nothing)."""
    out = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=10,  # noqa: S603 - the compiler, found on PATH
                         check=False)
    return out.stdout.splitlines()[0].strip() if out.stdout else os.path.basename(compiler)


def _command() -> list[str]:
    cc = _compiler()
    if cc is None:
        raise LookupError(f"no C compiler; {INSTALL_HINT}")
    return [cc, *FLAGS, "-I", INCLUDE, "-o", "agent", "agent.c", *LIBS]


def _build_id() -> str:
    with open(os.path.join(INCLUDE, "tacoma.h"), "rb") as f:
        header = hashlib.sha256(f.read()).hexdigest()
    return "\n".join([_version(), *_command(), f"tacoma.h {header}"])


def _check_program(program: bytes, name: str) -> str | None:
    """Compile it, as the place would (the same command), in a directory of its own."""
    if _compiler() is None:
        return None
    return compile_check(_command(), program, name, "the C compiler")


def compile_check(command: list[str], program: bytes, name: str, compiler: str) -> str | None:
    """Run `command` on `program` as agent.c in a directory of its own: None if it
    compiles, else its first error and its messages, naming the file `name`. For
    `tacoma install`, which refuses a program that does not compile (C for either
    language that builds it)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="tacoma-check-") as work:
        with open(os.path.join(work, "agent.c"), "wb") as source:
            source.write(program)
        try:
            out = subprocess.run(command, cwd=work, capture_output=True, text=True,  # noqa: S603 - the compiler, found on PATH
                                 errors="replace", timeout=120, check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            return f"{name}: {compiler} could not run: {exc}"
    if out.returncode == 0:
        return None
    messages = out.stderr.replace("agent.c:", f"{name}:")
    errors = [line for line in messages.splitlines() if ": error:" in line]
    return (errors[0] if errors else f"{name}: does not compile") + "\n" + messages.rstrip()


interpreter = Interpreter(
    language="c",
    agent="ag_c",
    suffixes=(".c",),
    worker_module="tacoma.interpreters.c._worker",
    check=_check,
    version=_version,
    check_program=_check_program,
    build=Build(source_name="agent.c", output_name="agent", command=_command,
                build_id=_build_id),
    # Functions of include/tacoma.h: the briefcase calls take a handle first (TC_SELF: the
    # agent's own), and calls that return lists fill a tc_list.
    spellings=spell("tc_", prefix="tc_"),
    extras={
        "tc_append_textf": "append printf-formatted text to a folder",
        "tc_list_free": "free the elements of a tc_list a call filled",
        "tc_new": "a new, empty briefcase handle, to meet or send with",
        "tc_free": "free a briefcase handle",
        "tc_error": "the message of the last call that failed",
        "tc_error_kind": "the kind of the last call that failed (unknown-agent, ...)",
    },
    programs={
        "minimal": "int main(void) { return 0; }",
        "arriver": """#include <tacoma.h>
int main(void) {
    tc_list tag;
    if (tc_folder(TC_SELF, "TAG", &tag) != 0 || tag.count != 1) tc_fail("no TAG");
    if (tc_cabinet_append((const char *)tag.items[0].data, "ARRIVED", ".", 1, 0) != 0)
        tc_fail("%s", tc_error());
    return 0;
}
""",
        "roamer": """#include <tacoma.h>
int main(void) {
    tc_append(TC_SELF, "HOPS", ".", 1);
    if (tc_go_next() != 0) tc_fail("go_next: %s", tc_error());
    return 0;
}
""",
    },
)
