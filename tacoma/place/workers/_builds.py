"""Compiled programs: each compiled once, in a sandbox, into a cache only the place writes.

For a language with a `Build` (C), a meet's program is compiled before the meet reaches a
worker. The output is kept under `STATE/cache/LANGUAGE/KEY`, where KEY hashes the program
together with the build's id (compiler version, flags, headers; see
`wire._program.artifact_key`), so the second meet with the same source runs the cached binary,
and a new compiler or header makes new keys rather than stale hits.

Why the place and not the worker compiles: a cache entry is trusted by everyone who sends
the same source. If agents could write the cache, one agent could replace the binary that
another agent's identical program will run. So the compiler runs confined like an agent (a
uid of its own, cgroups, the agent limits, every layer of the sandbox, a private directory:
`Containment.confined`),
and after it has exited and its cgroup is empty the place, alone, copies the output into
the cache (owned by the place, 0755 files in 0711 directories: agents may run what they can
name, not list or change it), within a count and a byte budget. Meets that want the same
key while it compiles wait for that one compile, which is bounded by the place's meet limit
(each waiting meet by its own timeout). A compile error fails the meet (AgentFailed) with
the compiler's messages.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import stat
import time
from pathlib import Path

from ...agent._interpreter import Interpreter
from ...agent._plan import Artifacts
from ...agent._sandbox import describe_exit
from ...wire._errors import (
    AgentFailed,
    AgentKilled,
    LimitExceeded,
    MeetTimeout,
    PlaceUnavailable,
)
from ...wire._program import artifact_key
from ..stores._statedir import Disk, disk_full
from ._containment import Containment

__all__ = ["Builds"]

log = logging.getLogger("tacoma.place")

#: Compiled programs kept per language, and their total size; past either the least
#: recently used are removed (after each compile, and when the place starts).
MAX_CACHED = 1000
MAX_CACHE_BYTES = 2 << 30
#: The largest compiled program taken into the cache.
MAX_PROGRAM = 256 << 20
#: How much of a compiler's output comes back with a compile error: the first errors are
#: the ones that matter, so this is the head of it, not the tail.
COMPILER_OUTPUT = 8192
#: A cache hit older than this has its time refreshed, for the start-up pruning.
TOUCH_AFTER = 3600.0


class Builds:
    """The compiled-program cache of one place."""

    def __init__(self, containment: Containment, mode: int, disk: Disk | None = None) -> None:
        self.containment = containment
        self.settings = containment.settings
        self.mode = mode  # of the cache directories: 0711 with separate uids, else 0700
        #: The state directory's disk: a program is cached only if it leaves the disk's
        #: reserve free, and the cache keeps a quarter of the disk at most.
        self.disk = disk
        self.most_bytes = min(MAX_CACHE_BYTES, disk.size // 4) if disk and disk.size \
            else MAX_CACHE_BYTES
        self._ids: dict[str, str] = {}
        self._dirs: dict[str, Path] = {}
        self._compiling: dict[Path, asyncio.Task[None]] = {}

    def directory(self, interpreter: Interpreter) -> Path:
        """The language's cache directory, made on first use (not a mkdir per meet)."""
        path = self._dirs.get(interpreter.language)
        if path is None:
            path = self.settings.cache_dir / interpreter.language
            path.mkdir(mode=self.mode, parents=True, exist_ok=True)
            self._dirs[interpreter.language] = path
        return path

    def build_id(self, interpreter: Interpreter) -> str:
        if interpreter.language not in self._ids:
            assert interpreter.build is not None
            self._ids[interpreter.language] = interpreter.build.build_id()
        return self._ids[interpreter.language]

    def worker_plan(self, interpreter: Interpreter) -> Artifacts:
        """What a worker of a compiled language needs to find programs in the cache (its
        plan's `artifacts`: it may run them by name, not list them)."""
        return Artifacts(directory=str(self.directory(interpreter)),
                         build_id=self.build_id(interpreter))

    def prune(self, interpreter: Interpreter, leftovers: bool = False) -> None:
        """Keep the most recently used programs of a language, within MAX_CACHED entries
        and `most_bytes`; `leftovers`: also remove copies a killed place left half-made."""
        entries = []
        for entry in os.scandir(self.directory(interpreter)):
            with contextlib.suppress(OSError):
                if entry.name.startswith("."):
                    if leftovers:
                        os.unlink(entry.path)
                else:
                    info = entry.stat()
                    entries.append((info.st_mtime, info.st_size, entry.path))
        entries.sort(reverse=True)
        total = 0
        for i, (_, size, path) in enumerate(entries):
            total += size
            if i >= MAX_CACHED or total > self.most_bytes:
                with contextlib.suppress(OSError):
                    os.unlink(path)

    async def ensure(self, interpreter: Interpreter, program: bytes, timeout: float,
                     name: str = "") -> Path:
        """The cached build of `program`, compiled now if it is not cached yet; the
        compiler's messages call the program `name` (its CODE_NAME), if given."""
        path = self.directory(interpreter) / artifact_key(self.build_id(interpreter), program)
        try:
            mtime = path.stat().st_mtime
        except FileNotFoundError:
            pass
        else:
            if time.time() - mtime > TOUCH_AFTER:
                with contextlib.suppress(OSError):
                    os.utime(path)
            return path
        task = self._compiling.get(path)
        if task is None:
            # Bounded by the place's own meet limit, not by the timeout of whichever meet
            # came first: other meets may be waiting for the same compile.
            task = asyncio.ensure_future(self._compile(
                interpreter, program, path, self.settings.limits.meet_seconds, name))
            self._compiling[path] = task
            task.add_done_callback(lambda t: self._done(path, t))
        # asyncio.wait, not wait_for: a caller that gives up does not cancel the compile
        # others may wait for, and the compile's own errors pass through unchanged.
        await asyncio.wait({task}, timeout=timeout)
        if not task.done():
            raise MeetTimeout(f"the {interpreter.language} program did not compile within "
                              f"{timeout:g} s")
        task.result()
        return path

    def _done(self, path: Path, task: asyncio.Task[None]) -> None:
        self._compiling.pop(path, None)
        if not task.cancelled():
            task.exception()  # retrieved: the waiters got it, if any were left

    async def _compile(self, interpreter: Interpreter, program: bytes, path: Path,
                       timeout: float, name: str = "") -> None:
        build = interpreter.build
        assert build is not None
        language = interpreter.language
        started = time.monotonic()
        async with self.containment.confined(f"{language}-build", build.command(),
                                             {build.source_name: program},
                                             timeout) as (returncode, workdir, output):
            messages = _head(output)
            if name and not name.startswith("<"):  # "hello.c:3:11: error: ...", its own name
                messages = messages.replace(f"{build.source_name}:", f"{name}:")
            if returncode != 0:
                if returncode < 0:
                    raise AgentKilled(f"the {language} compiler was killed: " + describe_exit(
                        returncode, self.settings.limits.cpu_seconds), messages)
                raise AgentFailed(_first_error(messages, language), messages)
            made = workdir / build.output_name
            try:
                if self.disk is not None:
                    self.disk.room(made.stat().st_size, f"a compiled {language} program")
                # In a thread: a program can be tens of megabytes.
                await asyncio.to_thread(_install, made, path)
            except OSError as exc:
                if disk_full(exc):
                    raise LimitExceeded(f"the place's disk is full: the compiled {language} "
                                        "program cannot be kept; try again later") from None
                raise PlaceUnavailable(f"the {language} compiler made no program: {exc}",
                                       messages) from None
        await asyncio.to_thread(self.prune, interpreter)
        log.info("compiled a %s program (%d bytes of source) in %.0f ms: %s", language,
                 len(program), (time.monotonic() - started) * 1000, path.name[:16])

    async def close(self) -> None:
        for task in list(self._compiling.values()):
            task.cancel()
        if self._compiling:
            await asyncio.wait(list(self._compiling.values()), timeout=10)


def _install(made: Path, path: Path) -> None:
    """Copy what the sandboxed compiler made into the cache, as the place's own file.

    Only a regular file with one link is taken (no symlink, FIFO or device: O_NONBLOCK so
    a FIFO cannot block the open), and it is copied, never moved, so nothing the compile's
    uid still holds can reach the cache; the copy is synced and renamed into place.
    """
    fd = os.open(made, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            raise OSError(f"{made.name} is not a regular file")
        if info.st_size > MAX_PROGRAM:
            raise OSError(f"{made.name} is {info.st_size:,} bytes, over the cache's "
                          f"{MAX_PROGRAM:,} per program")
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        out = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o755)
        try:
            while os.sendfile(out, fd, None, 1 << 20):
                pass
            os.fchmod(out, 0o755)
            os.fsync(out)
        except BaseException:
            os.close(out)
            with contextlib.suppress(OSError):
                partial.unlink()
            raise
        os.close(out)
        os.replace(partial, path)  # atomic: a worker sees the whole program or none
    finally:
        os.close(fd)


def _head(output: Path) -> str:
    try:
        with open(output, "rb") as f:
            data = f.read(COMPILER_OUTPUT + 1)
    except OSError:
        return ""
    text = data[:COMPILER_OUTPUT].decode("utf-8", "replace").rstrip()
    return text + ("\n..." if len(data) > COMPILER_OUTPUT else "")


def _first_error(messages: str, language: str) -> str:
    """The message of a failed compile: its first error line, as the compiler wrote it."""
    for line in messages.splitlines():
        if "error" in line.lower():
            return f"the {language.capitalize()} program does not compile: {line.strip()}"
    return f"the {language.capitalize()} program does not compile"
