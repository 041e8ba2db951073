"""Trusted Python agents: run in the place's own process, with no worker (see InProcess).

A trusted agent is a Python module that defines `meet(bc, principal)`. The place runs the
module once when it loads the agent (its globals are the agent's state from then on: a
directory's entries, a cache) and calls `meet` for each meet with the agent. Besides its own
names, the module has `place` (the place's address), `Briefcase`, and the errors of the
agent API to raise or catch (an error of tacoma's that it raises is the meet's error, as
sent: a service refuses with NotAllowed or MeetError).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping

from tacoma.wire import _errors
from tacoma.wire._briefcase import Briefcase

from . import AGENT_ERRORS, _check_program

__all__ = ["check", "load"]

#: What a trusted agent's module has besides its own names and what the place gives.
_GIVEN: dict[str, object] = {"Briefcase": Briefcase,
                             **{name: getattr(_errors, name)
                                for name in (*AGENT_ERRORS, "NotAllowed")}}


def check(program: bytes, name: str) -> str | None:
    """Why `program` cannot be a trusted agent (it does not parse, or has no meet taking a
    briefcase and a principal), or None. Parses; runs nothing."""
    problem = _check_program(program, name)  # any agent's check: it compiles
    if problem is not None:
        return problem
    for node in ast.parse(program, name).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == "meet":
            args = node.args
            if len(args.posonlyargs) + len(args.args) < 2 and args.vararg is None:
                return (f"{name}, line {node.lineno}: meet must take two arguments, the "
                        "briefcase and the caller's principal: def meet(bc, principal)")
            return None
    return (f"{name}: a trusted agent defines meet(bc, principal), which the place calls for "
            "each meet with it; this file has no such function at its top level")


def load(program: bytes, name: str, given: Mapping[str, object]) -> Callable[..., object]:
    """Run the module once and return its `meet` (ValueError saying why it cannot)."""
    problem = check(program, name)
    if problem is not None:
        raise ValueError(problem)
    stem = name.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    namespace: dict[str, object] = {"__name__": f"tacoma.trusted.{stem}", "__file__": name,
                                    **_GIVEN, **given}
    try:
        # Trusted by whoever installed it with --trusted: running it is the point.
        exec(compile(program, name, "exec", dont_inherit=True), namespace)  # noqa: S102
    except BaseException as exc:  # any error of its top level (SystemExit too) is why not
        raise ValueError(f"{name}: its top level raised {type(exc).__name__}: {exc}") from exc
    meet = namespace.get("meet")
    if not callable(meet):
        raise ValueError(f"{name}: meet is not a function once the module has run")
    return meet
