"""ag_wasm: WebAssembly agents, each meet in a fresh instance, run by wasmtime.

The CODE folder holds one of three things, told by its bytes:

- a WebAssembly module (binary, starting with `\\0asm`), a WASI preview 1 command: its
  `_start` is the agent;
- the same in the text format (WAT), starting with `(module`;
- C source that includes <tacoma.h> (the header C agents use), which the place compiles
  once with clang for wasm32-wasi and precompiles for the runtime, confined like an agent,
  into its cache (tacoma/place/workers/_builds.py), as ag_c compiles with cc.

A module or WAT needs no build: the worker compiles it on its first meet and keeps it for
later ones (by hash). Every meet gets a new store and a new instance: nothing of one meet's
memory, globals or tables is there for the next, whichever program or principal sent it.
The instances run inside a worker process confined by every layer of the OS sandbox, and
a worker serves one principal only (see _worker.py), so that an escape from the runtime
still meets the kernel's walls; a place run with --instances-in-place runs them on threads
of its own process instead (`_runner.lease`), with the runtime as their only wall.

The agent API is tacoma.h's (the same functions as ag_c, `tc_...`), reaching the worker
through two host functions, `tacoma.call` and `tacoma.reply`, instead of a socket.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess

from tacoma.agent._api import spell
from tacoma.agent._interpreter import Build, InPlaceRunner, Interpreter, python_argv

from ..c import (  # the one tacoma.h: C builds for either language
    INCLUDE,
    compile_check,
    compiler_version,
)
from ..c import interpreter as _c

#: Debian's packages for building C agents for WebAssembly (a module or WAT needs none).
C_HINT = ("to build C agents for WebAssembly, install clang, lld, WASI's libc and clang's "
          "wasm32 runtime (Debian: apt-get install clang lld wasi-libc libclang-rt-dev-wasm32)")
RUNTIME_HINT = "install wasmtime (pip install -e . in a clone of tacoma installs it)"
#: Where Debian's wasi-libc puts its headers and libraries (include/wasm32-wasi, lib/...).
SYSROOT = "/usr"
#: -g: a trap's backtrace names the agent's functions, files and lines (as agent.c, not
#: the build's directory at the place).
#: The linker on one thread: its threads' stacks do not fit the address space a build
#: has at a small --memory (it failed one build in seven at 256 MiB).
FLAGS = ("--target=wasm32-wasi", f"--sysroot={SYSROOT}", "-std=gnu17", "-O2", "-g",
         "-fdebug-compilation-dir=.", "-Wall", "-Wl,--threads=1")
LIBS = ("-lm",)
#: What the build step writes: the module, precompiled for this runtime's engine.
OUTPUT = "agent.cwasm"
WASM_MAGIC = b"\0asm"


def kind(program: bytes) -> str:
    """What a program is: "wasm" (a binary module), "wat" (its text format) or "c"."""
    if program.startswith(WASM_MAGIC):
        return "wasm"
    text = program.lstrip()
    while text.startswith((b";;", b"(;")):  # WAT's comments, before its first form
        end = text.find(b"\n") if text.startswith(b";;") else text.find(b";)")
        text = b"" if end < 0 else text[end + (1 if text.startswith(b";;") else 2):].lstrip()
    return "wat" if text.startswith(b"(") else "c"


def _needs_build(program: bytes) -> bool:
    return kind(program) == "c"


@functools.cache
def runtime_version() -> str | None:
    """wasmtime's version, or None if it cannot be imported."""
    try:
        import wasmtime
    except ImportError:
        return None
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("wasmtime")
    except PackageNotFoundError:
        return getattr(wasmtime, "__version__", "unknown")


def _clang() -> str | None:
    return shutil.which("clang")


def c_problem() -> str | None:
    """Why C agents cannot be built for WebAssembly here, or None."""
    clang = _clang()
    if clang is None:
        return f"no clang on PATH; {C_HINT}"
    if shutil.which("wasm-ld") is None and not any(
            os.path.exists(os.path.join(os.path.dirname(os.path.realpath(clang)), ld))
            for ld in ("wasm-ld", "lld")):
        return f"no wasm-ld (lld); {C_HINT}"
    if not os.path.isfile(os.path.join(SYSROOT, "lib", "wasm32-wasi", "libc.a")):
        return f"no WASI libc in {SYSROOT}/lib/wasm32-wasi; {C_HINT}"
    if not _builtins_found(clang):
        return f"no compiler-rt builtins for wasm32; {C_HINT}"
    return None


@functools.cache
def _builtins_found(clang: str) -> bool:
    """Whether clang's runtime library for wasm32 (compiler-rt's builtins) is installed."""
    try:
        out = subprocess.run([clang, "--target=wasm32-wasi", "-print-libgcc-file-name"],  # noqa: S603 - the compiler, found on PATH
                             capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return os.path.isfile(out.stdout.strip())


def _check() -> str | None:
    if runtime_version() is None:
        return f"the WebAssembly runtime wasmtime is not installed; {RUNTIME_HINT}"
    return None


@functools.cache
def _clang_version() -> str:
    clang = _clang()
    return compiler_version(clang) if clang is not None else ""


def _version() -> str:
    c = c_problem()
    return (f"wasmtime {runtime_version()}; C agents: "
            + (_clang_version() if c is None else f"not built here ({c})"))


def _in_place(output: int, file_limit: int, memory: int) -> InPlaceRunner:
    """A runner for a thread of a place that runs instances in its own process."""
    from ._runner import lease

    return lease(output, file_limit, memory)


def clang_command(output: str = "agent.wasm") -> list[str]:
    """clang's command for agent.c, as the build runs it."""
    clang = _clang()
    if clang is None:
        raise LookupError(f"no clang; {C_HINT}")
    return [clang, *FLAGS, "-I", INCLUDE, "-o", output, "agent.c", *LIBS]


def _command() -> list[str]:
    return python_argv("tacoma.interpreters.wasm._build", "the WebAssembly build")


def _build_id() -> str:
    from ._engine import ARTIFACT_MAGIC, CONFIG_ID

    with open(os.path.join(INCLUDE, "tacoma.h"), "rb") as f:
        header = hashlib.sha256(f.read()).hexdigest()
    return "\n".join([f"wasmtime {runtime_version()} {CONFIG_ID}", ARTIFACT_MAGIC.hex(),
                      _clang_version(),
                      *clang_command(), f"tacoma.h {header}"])


def _check_program(program: bytes, name: str) -> str | None:
    """Why a program cannot run, found without running it: a module or WAT that the
    runtime does not take, or C source that clang does not compile."""
    what = kind(program)
    if what != "c":
        if runtime_version() is None:
            return None
        from ._engine import compile_module

        try:
            compile_module(program)
        except ValueError as exc:
            return f"{name}: {exc}"
        return None
    if c_problem() is not None:
        return None
    return compile_check(clang_command(), program, name, "clang")


#: A module that starts and ends: the null agent, with no WASI import at all.
MINIMAL = '(module (func (export "_start")))\n'

interpreter = Interpreter(
    language="wasm",
    agent="ag_wasm",
    suffixes=(".wasm", ".wat"),
    worker_module="tacoma.interpreters.wasm._worker",
    check=_check,
    version=_version,
    check_program=_check_program,
    build=Build(source_name="agent.c", output_name=OUTPUT, command=_command,
                build_id=_build_id, wanted=_needs_build),
    # tacoma.h's functions, as for C: the same source builds for either.
    spellings=spell("tc_", prefix="tc_"),
    extras=dict(_c.extras),
    programs={
        "minimal": MINIMAL,
        "arriver": _c.programs["arriver"],
        "roamer": _c.programs["roamer"],
    },
    instances=True,
    in_place=_in_place,
)
