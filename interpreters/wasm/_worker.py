"""The ag_wasm worker: each meet in a fresh WebAssembly instance, inside a confined process.

Run by the place as this language's zygote (tacoma/agent/_zygote.py), which has loaded the
runtime and made its engine once; each forked worker is confined like every worker before
a meet reaches it, and runs its meets with one `_runner.Runner` (what an instance may do and
use, and how a meet ends, are said there). The place keeps such a worker warm for later
meets of the same principal, whatever their program (`Interpreter.instances`): the store
and the instance are the boundary between one meet and the next, the process and the
kernel's layers the one between principals.

The instances' memory is bounded by the store's limits, under the process's RLIMIT_AS: an
instance may grow to about half of what the worker leaves free (`_free_address_space`).
"""

from __future__ import annotations

import os
import re
import resource

from tacoma.agent import _zygote as zygote
from tacoma.agent._api import check_bound
from tacoma.agent._channel import AgentChannel
from tacoma.wire._briefcase import Briefcase
from tacoma.wire._protocol import Meet

from ..c import INCLUDE
from . import MINIMAL, interpreter
from ._runner import Runner

#: Memory the worker keeps for its own allocations (MARGIN), and what a memory reserves to
#: grow into (GROWTH: _engine's memory_reservation_for_growth), out of its address space.
MARGIN = 24 << 20
GROWTH = 16 << 20
_DECLARATION = re.compile(r"^TC__API\b[^(;]*?\b(tc_[a-z]\w*)\(", re.MULTILINE)

with open(os.path.join(INCLUDE, "tacoma.h"), encoding="utf-8") as _header:
    check_bound(interpreter.language, interpreter.spellings,
                frozenset(_DECLARATION.findall(_header.read())), interpreter.extras)

#: The worker's runner: made in the zygote (its engine and linker), so every worker forked
#: from it starts with them. Its ticker's thread is started in each worker (`_prepare`).
RUNNER: Runner | None = None


def _runner() -> Runner:
    global RUNNER
    if RUNNER is None:
        RUNNER = Runner(watch=False)
    return RUNNER


def _prepare() -> None:
    """In each worker, confined: its ticker's thread (before the worker's baseline, which
    counts its threads), then the memory its instances may have (what the thread's stack
    leaves)."""
    runner = _runner()
    runner.ticker.begin()
    runner.memory = _free_address_space()


def _free_address_space() -> int | None:
    """The most memory an instance may grow to under the process's RLIMIT_AS: what the
    worker leaves free, less a margin for its own allocations, halved (a memory grows by
    moving: for a moment its old and new copies, each with its growth room, are both
    mapped); None if the process has no RLIMIT_AS."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    with open("/proc/self/status", encoding="ascii") as status:
        mapped = next((int(line.split()[1]) * 1024 for line in status
                       if line.startswith("VmSize:")), 0)
    return max(16 << 20, (soft - mapped - MARGIN) // 2 - GROWTH)


def run(meet: Meet, channel: AgentChannel) -> Briefcase:
    return _runner().run(meet, channel)


#: Run once before the worker is ready, so the first real meet finds warm code paths.
WARM_UP = Meet(0, "ag_wasm", Briefcase(CODE=[MINIMAL.encode()]))

if __name__ == "__main__":
    zygote.main(run, WARM_UP, prepare=_prepare, instances=interpreter.instances)
