"""An agent's program, as the place and the worker both name it.

The place (to compile and cache a program) and the worker (to find it in the cache) each
take the program from a briefcase with `program_bytes` and name its build with
`artifact_key`, so both sides agree by construction. Standard library only.
"""

from __future__ import annotations

import hashlib

from ._briefcase import CODE, CODE_NAME, Briefcase

__all__ = ["artifact_key", "program_bytes"]


def program_name(briefcase: Briefcase) -> str:
    """The name an agent's errors give its program: the CODE_NAME folder's file name
    ("hello.py", only its last part, printable, at most 100 characters), else "<agent>"."""
    names = briefcase.folder(CODE_NAME)
    if names:
        name = names[0].decode("utf-8", "replace").rsplit("/", 1)[-1][:100]
        if name and name.isprintable():
            return name
    return "<agent>"


def program_bytes(briefcase: Briefcase) -> bytes:
    """The agent's program as bytes: the CODE folder's elements joined by newlines."""
    return b"\n".join(briefcase.folder(CODE))


def artifact_key(build_id: str, program: bytes) -> str:
    """The name of a compiled program in its language's cache: a hash of everything that
    decides what the compiler makes of it (PAN names code by a cryptographic hash too)."""
    digest = hashlib.sha256(build_id.encode("utf-8"))
    digest.update(b"\0")
    digest.update(program)
    return digest.hexdigest()
