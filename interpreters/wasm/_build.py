"""The build step of a C agent for WebAssembly, run by the place confined like an agent in
a directory of its own holding agent.c (see tacoma/place/workers/_builds.py).

clang compiles agent.c for wasm32-wasi (tacoma.h on its include path) into agent.wasm, and
the runtime precompiles that: agent.cwasm holds both (`_engine.pack_artifact`). A module
or its text, which a place builds only when it runs instances in its own process, is
compiled as it came. Workers load the precompiled module in a fraction of a millisecond
where compiling takes tens; a place that runs instances in its own process compiles the
module instead. clang's messages, and the runtime's, go to stdout, which the place returns
with a failed compile.
"""

from __future__ import annotations

import os
import subprocess
import sys

import wasmtime

from . import OUTPUT, clang_command, kind
from ._engine import compile_module, new_engine, pack_artifact


def main() -> int:
    with open("agent.c", "rb") as f:
        source = f.read()
    if kind(source) != "c":
        return _module_only(source)
    try:
        command = clang_command("agent.wasm")
    except LookupError as exc:
        print(f"agent.c: error: cannot build C for WebAssembly here: {exc}")
        return 1
    # clang's temporary files in the build's own /tmp. Its working directory is written
    # through the descriptor it started in; by its path, below a state directory that
    # lies below the host's /tmp, it is the host's, shown read-only, and clang (unlike
    # gcc) does not fall back from an unwritable TMPDIR.
    env = {**os.environ, "TMPDIR": "/tmp"}  # noqa: S108 - the build's own, private /tmp
    done = subprocess.run(command, stdout=sys.stdout, stderr=subprocess.STDOUT,  # noqa: S603 - the compiler, found on PATH
                          env=env, check=False)
    if done.returncode != 0:
        return done.returncode if done.returncode > 0 else 1
    with open("agent.wasm", "rb") as f:
        program = f.read()
    try:
        module = compile_module(program, new_engine(parallel=True))
    except ValueError as exc:
        print(f"agent.c: error: the runtime does not take clang's module: {exc}")
        return 1
    with open(OUTPUT, "wb") as f:
        f.write(pack_artifact(program, bytes(module.serialize())))
    return 0


def _module_only(program: bytes) -> int:
    """A module or its text, as it came (a place that runs instances in its own process
    has every program compiled here first, confined: what compiling it takes in memory
    and time is then known to fit the agent's limits before the place compiles it)."""
    try:
        binary = program if kind(program) == "wasm" else \
            bytes(wasmtime.wat2wasm(program.decode()))
        module = compile_module(binary, new_engine(parallel=True))
    except (ValueError, UnicodeDecodeError, wasmtime.WasmtimeError) as exc:
        print(f"error: the CODE folder is not a WebAssembly module the runtime takes: {exc}")
        return 1
    with open(OUTPUT, "wb") as f:
        f.write(pack_artifact(binary, bytes(module.serialize())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
