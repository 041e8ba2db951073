"""The build step of a C agent for WebAssembly, run by the place confined like an agent in
a directory of its own holding agent.c (see tacoma/place/workers/_builds.py).

clang compiles agent.c for wasm32-wasi (tacoma.h on its include path) into agent.wasm, and
the runtime precompiles that: agent.cwasm holds both (`_engine.pack_artifact`). Workers
load the precompiled module in a fraction of a millisecond where compiling takes tens; a
place that runs instances in its own process compiles the module instead. clang's
messages, and the runtime's, go to stdout, which the place returns with a failed compile.
"""

from __future__ import annotations

import os
import subprocess
import sys

from . import OUTPUT, clang_command
from ._engine import compile_module, new_engine, pack_artifact


def main() -> int:
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


if __name__ == "__main__":
    sys.exit(main())
