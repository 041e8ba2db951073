"""The runtime's settings, one place for the worker and the build step.

A module precompiled by the build step is loaded by workers only if it was compiled with
the same engine settings (wasmtime checks, and refuses one that differs): both make their
engine here, and CONFIG_ID, part of the build's id, changes the cache key when they change.

- Epoch interruption: the worker stops a running instance by bumping the engine's epoch
  (its meet's CPU time or deadline passed; see _runner.Ticker).
- No large virtual reservation per linear memory: a worker runs under RLIMIT_AS (the
  meet's memory limit), which wasmtime's default 4 GiB reservation and 2 GiB guard would
  exceed. Memories are bounds-checked explicitly instead, and grow by moving. (A place
  that runs instances in its own process, which has no RLIMIT_AS, keeps wasmtime's own
  reservations: `new_engine(reserve=True)`.)
- Memories initialised by copying, not from a memory-mapped image: such an image is a
  file descriptor the module holds, and a warm worker closes, between meets, every
  descriptor it did not have before its first (agent._reuse).
- Backtraces with file and line, inlined functions included, where the module has DWARF
  (C agents are built with -g): WASMTIME_BACKTRACE_DETAILS, which the engine reads when
  it is made.
- One linear memory per module (no multi-memory), and at most one table and one instance
  per store (the worker's limits): the store's limits bound each memory and each table,
  not their sum.
- Compilation on the calling thread only: a worker is forked from its zygote, and a
  compiler's thread pool must not be started in one and used in another; nor may a
  worker's meet leave threads behind.
"""

from __future__ import annotations

import os

import wasmtime

__all__ = ["CONFIG_ID", "compile_module", "new_engine", "pack_artifact", "unpack_artifact"]

#: The engine's settings (wasmtime.Config's attributes), as the module says.
SETTINGS: dict[str, object] = {
    "epoch_interruption": True,
    "memory_reservation": 0,
    "memory_guard_size": 0,
    "memory_reservation_for_growth": 16 << 20,
    "memory_init_cow": False,
    "cranelift_opt_level": "speed",
    # One linear memory per module: the store's limit bounds each memory, not their sum.
    "wasm_multi_memory": False,
}
#: What the engine is made with, for the build's id: a precompiled module loads only in an
#: engine made alike.
CONFIG_ID = " ".join(f"{name}={value}" for name, value in sorted(SETTINGS.items())) + \
    " WASMTIME_BACKTRACE_DETAILS=1"


#: The settings that keep memories small in address space: the place's own process has no
#: RLIMIT_AS, so there a memory is reserved whole, with its guard pages, and never moves as
#: it grows (moving copies it: a memory grown a page at a time to 256 MiB took seconds).
SMALL_RESERVATIONS = frozenset({"memory_reservation", "memory_guard_size",
                                "memory_reservation_for_growth"})


def new_engine(parallel: bool = False, reserve: bool = False) -> wasmtime.Engine:
    """An engine with SETTINGS (`parallel`: compile on several threads, for a build step of
    its own, which ends after it; a worker compiles on its own thread; `reserve`: with
    wasmtime's own reservations for memories, for a process with address space to spare,
    whose engine loads no build's precompiled module)."""
    if os.environ.get("WASMTIME_BACKTRACE_DETAILS") != "1":  # once: others read it
        os.environ["WASMTIME_BACKTRACE_DETAILS"] = "1"
    config = wasmtime.Config()
    for name, value in SETTINGS.items():
        if not (reserve and name in SMALL_RESERVATIONS):
            setattr(config, name, value)
    config.parallel_compilation = parallel
    return wasmtime.Engine(config)


#: What a C agent's build leaves in the place's cache: this magic, the module's length (a
#: big-endian u64), the module (clang's, as the runtime validated it), then the module
#: precompiled for this engine. A confined worker loads the precompiled form (native code,
#: run as it is: it trusts its build no more than itself); a place that runs instances in its
#: own process compiles the module itself, so that a build subverted by its source (an
#: exploit of clang) cannot hand the place native code.
ARTIFACT_MAGIC = b"tacoma-wasm-1\0"


def pack_artifact(module: bytes, precompiled: bytes) -> bytes:
    return ARTIFACT_MAGIC + len(module).to_bytes(8, "big") + module + precompiled


def unpack_artifact(data: bytes) -> tuple[bytes, bytes]:
    """(the module, its precompiled form) from what `pack_artifact` made; ValueError if it
    is not that."""
    head = len(ARTIFACT_MAGIC)
    if not data.startswith(ARTIFACT_MAGIC) or len(data) < head + 8:
        raise ValueError("not a WebAssembly build's output")
    size = int.from_bytes(data[head:head + 8], "big")
    if head + 8 + size > len(data):
        raise ValueError("a WebAssembly build's output cut short")
    return data[head + 8:head + 8 + size], data[head + 8 + size:]


def compile_module(program: bytes, engine: wasmtime.Engine | None = None) -> wasmtime.Module:
    """A module from its binary or text (WAT); ValueError saying why it is not one an agent
    may be: not valid, or with a start function (which would run as it is instantiated,
    before its meet's limits are watched: an agent begins in `_start`)."""
    try:
        binary = program if program.startswith(b"\0asm") else \
            bytes(wasmtime.wat2wasm(program.decode()))
        module = wasmtime.Module(engine or new_engine(), binary)
    except UnicodeDecodeError as exc:
        raise ValueError(f"neither a WebAssembly module nor its text (WAT): {exc}") from None
    except wasmtime.WasmtimeError as exc:
        raise ValueError(_first_line(str(exc))) from None
    if _has_start(binary):
        raise ValueError("the module has a start function, which a place does not run: "
                         "an agent begins in its exported _start")
    return module


def _has_start(binary: bytes) -> bool:
    """Whether a valid module's binary has a start section (id 8). Read here because
    wasmtime does not say; the format is a magic, a version, then sections, each an id
    byte and its size as an unsigned LEB128."""
    at = 8
    while at < len(binary):
        section, at = binary[at], at + 1
        size = shift = 0
        while True:
            byte, at = binary[at], at + 1
            size |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        if section == 8:
            return True
        at += size
    return False


def _first_line(message: str) -> str:
    """wasmtime's error, without its backtrace-like "Caused by" listing where it has one."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    if not lines:
        return "not a WebAssembly module"
    causes = [line for line in lines[1:] if not line.lower().startswith("caused by")]
    return lines[0] + (f": {causes[-1].lstrip('0123456789: ')}" if causes else "")
