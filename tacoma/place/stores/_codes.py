"""Programs named by their hash: the place's side of CODE_HASH (PAN's first step).

A client sends an agent's program once; after that, the hash of it (wire._briefcase's
CODE_HASH in place of CODE). The place keeps the programs it was sent, by principal and
digest, and puts CODE back into a meet's briefcase before anything else sees it; a program
it does not have (never sent, forgotten, the place restarted) is asked for with
CodeUnknown, and the client sends the meet again with the program: one round trip, once.
The same holds between places, for an agent that moves (a hop is a meet from a place).

Programs are kept per principal, so that no one can learn from a place whether someone else
ran a program, nor run it without sending it once themselves. The store is bounded
(STORE_BYTES, the least recently used programs go first) and lives in memory only: a place
that restarts asks again.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

from ...wire._briefcase import CODE, CODE_HASH, Briefcase
from ...wire._errors import CodeUnknown, ProtocolError
from ...wire._program import CODE_BY_HASH_MIN, code_digest

__all__ = ["CodeStore"]

#: Bytes of programs a place keeps for meets that name them by hash.
STORE_BYTES = 64 << 20
#: Length of a CODE_HASH element (SHA-256).
DIGEST_BYTES = 32


@dataclass
class CodeStats:
    """What the store did since the place started (for `tacoma status`)."""

    programs: int = 0  # kept now
    bytes: int = 0  # of programs kept now
    named: int = 0  # meets that named their program by hash and found it
    asked: int = 0  # meets whose program was asked for (CodeUnknown)
    saved: int = 0  # bytes of programs not sent, as meets named them


class CodeStore:
    """The programs a place was sent, by (principal, digest), least recently used first."""

    def __init__(self, limit: int = STORE_BYTES) -> None:
        self.limit = limit
        self._programs: collections.OrderedDict[tuple[str, bytes], list[bytes]] = (
            collections.OrderedDict())
        self.stats = CodeStats()

    def take(self, principal: str, briefcase: Briefcase) -> bytes | None:
        """Make `briefcase` whole for `principal`: CODE_HASH replaced by the program it
        names (CodeUnknown if not here), or a program sent in full remembered. The program's
        digest, or None for a briefcase without one worth naming."""
        if CODE_HASH in briefcase:
            named = briefcase.remove(CODE_HASH)
            if CODE in briefcase:  # both: the program sent wins, the name is dropped
                return self._remember(principal, briefcase[CODE])
            if len(named) != 1 or len(named[0]) != DIGEST_BYTES:
                raise ProtocolError(f"{CODE_HASH} must hold one {DIGEST_BYTES}-byte digest")
            key = (principal, named[0])
            program = self._programs.get(key)
            if program is None:
                self.stats.asked += 1
                raise CodeUnknown(f"the place does not have program {named[0].hex()[:16]}...: "
                                  "send it")
            self._programs.move_to_end(key)
            briefcase[CODE] = program
            self.stats.named += 1
            self.stats.saved += sum(len(e) for e in program)
            return named[0]
        program = briefcase.folder(CODE)
        if sum(len(e) for e in program) < CODE_BY_HASH_MIN:
            return None
        return self._remember(principal, program)

    def _remember(self, principal: str, program: list[bytes]) -> bytes:
        digest = code_digest(program)
        key = (principal, digest)
        if key in self._programs:
            self._programs.move_to_end(key)
            return digest
        size = sum(len(e) for e in program)
        if size > self.limit:
            return digest
        self._programs[key] = list(program)
        self.stats.programs += 1
        self.stats.bytes += size
        while self.stats.bytes > self.limit:
            _, dropped = self._programs.popitem(last=False)
            self.stats.programs -= 1
            self.stats.bytes -= sum(len(e) for e in dropped)
        return digest


def named_in_reply(result: Briefcase, sent: list[bytes], digest: bytes) -> Briefcase:
    """The result briefcase to send back: its CODE, if it is still the program the meet
    came with (`sent`), replaced by the program's hash (the client has the program)."""
    if result.folder(CODE) == sent:  # list equality: element identity first, then bytes
        return result.swapped(CODE, CODE_HASH, [digest])
    return result
