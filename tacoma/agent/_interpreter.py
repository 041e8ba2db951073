"""The interface between the kernel and a language adapter.

An adapter (a folder under interpreters/, or a third-party package) exposes one
`Interpreter` value through the `tacoma.interpreters` entry-point group. The kernel knows
languages only through these values: it starts `worker_argv()` processes for the pool, hands
each one meet over the worker channel, and matches installed agents by file suffix.

A worker process must: call `tacoma.agent._sandbox.enter` with the plan passed as its last
argument, speak the worker side of the protocol on the file descriptor named in the plan
(`tacoma.agent._channel.serve_one` does both for Python-hosted workers), run one meet, answer it
with a Result or Failed, and exit.

A compiled language also gives a `Build`: the place then compiles each new program before
the meet reaches a worker, in a sandboxed process of its own, and keeps the output in a
cache that only the place writes (see _builds); the worker finds it there by the same key.

Every adapter binds the one agent API (`_api.API`) and says how it spells each call
(`spellings`), and which helpers of its own it adds (`extras`): the worker checks its binding
against the table when its zygote starts (`_api.check_bound`), `discover_interpreters` warns
about an adapter that leaves calls out, and the conformance suite probes every spelling in
the real language.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from ._api import unbound

if TYPE_CHECKING:
    from ..wire._briefcase import Briefcase
    from ..wire._protocol import Meet
    from ._channel import AgentChannel

__all__ = ["PROGRAMS", "Build", "InPlaceRunner", "Interpreter", "discover_interpreters",
           "python_argv"]

log = logging.getLogger("tacoma.place")


@dataclass(frozen=True, slots=True)
class Build:
    """How a compiled language turns an agent's program into what its worker runs.

    source_name: the file the program (the CODE folder, see `wire._program.program_bytes`) is
    written to in the build's private directory ("agent.c"); output_name: the file the
    command makes there ("agent"); command: the argv that compiles one into the other,
    run in that directory, confined like an agent; build_id: everything besides the program
    that decides the output (compiler version, flags, headers), so that the cache key
    changes with it; computed once per place. wanted: whether a program needs building at
    all (a language whose workers also take some programs as they come, as WebAssembly's
    take a module, and build only C source); every program does by default.
    """

    source_name: str
    output_name: str
    command: Callable[[], list[str]]
    build_id: Callable[[], str]
    wanted: Callable[[bytes], bool] = field(default=lambda program: True)


#: What each of an interpreter's `programs` does, by name (tacoma bench runs them):
PROGRAMS: dict[str, str] = {
    "minimal": "starts and ends",
    "arriver": "appends one element, '.', to folder ARRIVED of the cabinet (public) that "
               "its TAG folder names",
    "roamer": "appends one element, '.', to its HOPS folder, then goes to the next place of "
              "its ITINERARY (go_next)",
}


@dataclass(frozen=True, slots=True)
class InProcess:
    """How a language the place itself runs loads a *trusted* agent into the place's own
    process (`tacoma install --trusted`): no worker, no isolation, for services such as a
    directory or a cache (PAN's in-kernel mode).

    check: given the program and its file's name, why it cannot be loaded (naming file and
    line where it can), or None; run before it is installed, without running it. load:
    given the program, its file's name and what the program may use besides its own
    (the place's address as `place`), runs it once and returns the function the place calls
    for each meet: `meet(bc, principal)`, with the meet's briefcase and its caller's
    principal name ("" if anonymous), returning the result briefcase (or None: `bc` as it
    left it), or an awaitable of one. Raises ValueError saying why it cannot be loaded.
    null: a trusted agent that returns its briefcase as it came, for tools that measure
    (`tacoma bench overhead`), so that no tool of the kernel holds source text.
    """

    check: Callable[[bytes, str], str | None]
    load: Callable[[bytes, str, Mapping[str, object]], Callable[..., object]]
    null: str


class InPlaceRunner(Protocol):
    """What runs meets on one thread of a place that runs instances in its own process
    (`Interpreter.in_place`), one meet at a time, each in a fresh instance.

    run: runs one meet (as a worker's runner does: `_channel.serve_thread` calls it),
    bounding its CPU time by the thread's own clock and its time by the meet's; it must
    never end the process (a moving agent's `go` returns). stop: from any thread, stops the
    meet running now at once (the place gave up on it). close: the thread is done with it.
    """

    def run(self, meet: Meet, channel: AgentChannel) -> Briefcase: ...

    def stop(self) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Interpreter:
    """A language adapter.

    language: short name ("python"); agent: the agent name it serves ("ag_python");
    suffixes: file suffixes of installed agents it runs (".py"); worker_module: the module
    run by the place as the language's zygote; check: returns why the language cannot run
    here, or None when it can; version: the language implementation's version, for
    `tacoma doctor`; build: for a compiled language, how its programs are compiled;
    programs: small programs in this language that tools run, by what they do (PROGRAMS),
    so that no tool of the kernel holds source text in any language; spellings: how the
    language spells each call of the agent API, by the call's name in `_api.CALLS`
    ("append" -> "bc_append"), usually made by `_api.spell` from a rule and its exceptions;
    several calls may share one spelling where the language makes them one (Python's `meet`
    with mode="async" is meet_async); extras: the names the
    language binds besides the calls, for its own values (C's `tc_new`, Python's
    `Briefcase`), each with what it is for; check_program: given a program (a CODE folder's
    bytes) and its file's name, why it cannot run, naming the file and line where that can
    be told (a syntax error, a compile error), or None when nothing wrong is found, for
    `tacoma install` to refuse it at once rather than at its first meet; in_process: for
    the language the place itself is written in, how it runs trusted agents in its own
    process (None: every agent of the language runs in a worker); instances: each meet
    runs in a fresh instance of the language's runtime, which keeps one meet from the next
    (a warm worker then serves any program of its principal); in_place: for such a
    language, what runs its instances on a thread of a place that runs them in its own
    process (`--instances-in-place`), given the meet output's file descriptor, the most
    bytes it may hold and the most memory an instance may have.
    """

    language: str
    agent: str
    suffixes: tuple[str, ...]
    worker_module: str
    check: Callable[[], str | None] = field(default=lambda: None)
    version: Callable[[], str] = field(default=lambda: "")
    build: Build | None = None
    programs: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)
    spellings: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)
    extras: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)
    check_program: Callable[[bytes, str], str | None] = field(
        default=lambda program, name: None, compare=False, hash=False)
    in_process: InProcess | None = field(default=None, compare=False, hash=False)
    instances: bool = False
    in_place: Callable[[int, int, int], InPlaceRunner] | None = field(
        default=None, compare=False, hash=False)

    def worker_argv(self) -> list[str]:
        """The command that starts one worker (the sandbox plan is appended to it).

        -I ignores PYTHON* variables and the user's site directory; -S skips `site`, whose
        .pth files cost tens of milliseconds per process, so the place puts on sys.path the
        directories its own imports came from (tacoma's, msgpack's, the adapter's), and
        where an editable install maps tacoma.interpreters to the source tree's
        interpreters/ folder, the boot line makes that package by hand; -B: an agent never
        writes bytecode into the installation; faulthandler: a crash leaves a traceback in
        the worker's output, which the place returns with the error.
        """
        return python_argv(self.worker_module, f"interpreter {self.language}")


def python_argv(module: str, what: str = "") -> list[str]:
    """The command that runs `module` (a worker's, or a build step's) in a Python like the
    place's, as `Interpreter.worker_argv` says; LookupError if it has no such module."""
    path = module_file(module)
    if path is None:
        raise LookupError(f"{what or module}: no module {module}")
    paths = list(worker_sys_path())
    top = module_file(module.split(".")[0])
    if top is not None:
        parent = os.path.dirname(os.path.dirname(top))
        if parent not in paths:
            paths.append(parent)
    boot = f"import sys; sys.path[:0] = {paths!r}; "
    interpreters = module_file("tacoma.interpreters")
    if module.startswith("tacoma.interpreters.") and interpreters is not None:
        boot += ("import types, tacoma; p = types.ModuleType('tacoma.interpreters'); "
                 f"p.__path__ = [{os.path.dirname(interpreters)!r}]; "
                 "sys.modules[p.__name__] = tacoma.interpreters = p; ")
    boot += f"import runpy; runpy.run_module({module!r}, run_name='__main__')"
    return [sys.executable, "-I", "-S", "-B", "-X", "faulthandler", "-c", boot]


def module_file(module: str) -> str | None:
    """Where a module's file is, without running it."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    return spec.origin if spec is not None else None


@functools.cache
def worker_sys_path() -> list[str]:
    """Directories a worker needs on sys.path: those holding tacoma and msgpack (and with
    them the rest of site-packages), in the place's order, without duplicates."""
    found: list[str] = []
    for module in ("tacoma", "msgpack"):
        origin = module_file(module)
        if origin is not None:
            parent = os.path.dirname(os.path.dirname(origin))
            if parent not in found:
                found.append(parent)
    return found


def map_checkout_interpreters() -> None:
    """Make tacoma.interpreters from a checkout's interpreters/ folder, when the tacoma
    imported is a checkout's tacoma/ that has none.

    Python run in a clone (a REPL, `python -c`, a notebook beside it) finds the clone's
    tacoma/ first on sys.path, ahead of the installed package; an install maps
    tacoma.interpreters from interpreters/ (setup.cfg's package_dir), the checkout does
    not, and the installed entry points (`tacoma.interpreters.python:interpreter`) would
    then fail to load. Mapped here with a real spec, so that `worker_argv`'s boot line maps
    it in the workers too."""
    if "tacoma.interpreters" in sys.modules or module_file("tacoma.interpreters") is not None:
        return
    folder = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "interpreters")
    init = os.path.join(folder, "__init__.py")
    if not os.path.isfile(init):
        return
    spec = importlib.util.spec_from_file_location("tacoma.interpreters", init,
                                                  submodule_search_locations=[folder])
    if spec is None or spec.loader is None:
        return
    package = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = package
    spec.loader.exec_module(package)
    sys.modules["tacoma"].interpreters = package  # type: ignore[attr-defined]


def discover_interpreters() -> dict[str, Interpreter]:
    """The installed interpreters, by agent name; broken plugins are logged and skipped."""
    import importlib.metadata  # 20 ms to import: only the place needs it, never a worker

    map_checkout_interpreters()
    found: dict[str, Interpreter] = {}
    for ep in importlib.metadata.entry_points(group="tacoma.interpreters"):
        try:
            value = ep.load()
        except Exception as exc:  # noqa: BLE001 - a broken plugin must not stop the place
            log.warning("interpreter plugin %s failed to load: %s", ep.name, exc)
            continue
        if not isinstance(value, Interpreter):
            log.warning("interpreter plugin %s is not a tacoma.Interpreter; skipped", ep.name)
            continue
        missing, extra = unbound(value.spellings)
        if missing or extra:  # it fails the conformance suite; say so where it is loaded
            log.warning("interpreter plugin %s does not spell the whole agent API (see "
                        "tacoma/agent/_api.py): missing %s; not calls: %s", ep.name,
                        ", ".join(missing) or "none", ", ".join(extra) or "none")
        found.setdefault(value.agent, value)
    return found
