"""An agent's program, as the place and the worker both name it.

The place (to compile and cache a program) and the worker (to find it in the cache) each
take the program from a briefcase with `program_bytes` and name its build with
`artifact_key`, so both sides agree by construction. Standard library only.
"""

from __future__ import annotations

import hashlib

from ._briefcase import CODE, CODE_NAME, Briefcase

__all__ = ["CODE_BY_HASH_MIN", "artifact_key", "code_digest", "program_bytes"]

#: Programs of at least this many bytes travel by hash once the place has them (CODE_HASH):
#: for smaller ones the hash and the round trip it may cost are not worth it.
CODE_BY_HASH_MIN = 256


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


def code_digest(folder: list[bytes]) -> bytes:
    """The SHA-256 of a CODE folder, each element with its length, so that no two folders
    share a digest by moving bytes between elements (what CODE_HASH carries)."""
    digest = hashlib.sha256()
    for element in folder:
        digest.update(len(element).to_bytes(8, "big"))
        digest.update(element)
    return digest.digest()
