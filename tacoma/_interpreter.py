"""The interface between the kernel and a language adapter.

An adapter (a folder under interpreters/, or a third-party package) exposes one
`Interpreter` value through the `tacoma.interpreters` entry-point group. The kernel knows
languages only through these values: it starts `worker_argv()` processes for the pool, hands
each one meet over the worker channel, and matches installed agents by file suffix.

A worker process must: call `tacoma._sandbox.enter` with the plan passed as its last
argument, speak the worker side of the protocol on the file descriptor named in the plan
(`tacoma._agentside.serve_one` does both for Python-hosted workers), run one meet, answer it
with a Result or Failed, and exit.
"""

from __future__ import annotations

import importlib.metadata
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["Interpreter", "discover_interpreters"]

log = logging.getLogger("tacoma.place")


@dataclass(frozen=True, slots=True)
class Interpreter:
    """A language adapter.

    language: short name ("python"); agent: the agent name it serves ("ag_python");
    suffixes: file suffixes of installed agents it runs (".py"); worker_module: the module
    run as `python -m` to make a worker; check: returns why the language cannot run here,
    or None when it can.
    """

    language: str
    agent: str
    suffixes: tuple[str, ...]
    worker_module: str
    check: Callable[[], str | None] = field(default=lambda: None)

    def worker_argv(self) -> list[str]:
        # -I: ignore PYTHON* variables and the user's site directory; -B: an agent never
        # writes bytecode into the installation; faulthandler: a crash leaves a traceback in
        # the worker's output, which the place returns with the error.
        return [sys.executable, "-I", "-B", "-X", "faulthandler", "-m", self.worker_module]


def discover_interpreters() -> dict[str, Interpreter]:
    """The installed interpreters, by agent name; broken plugins are logged and skipped."""
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
        found.setdefault(value.agent, value)
    return found
