"""The embedded place: a place inside this process, for meets that name no place.

`tacoma meet ag_python --code x.py` and `tacoma.meet("ag_python", ...)` need no daemon: the
first such meet starts a place on the background loop (`_runtime`), listening on a free
loopback port with a temporary state directory and a CA of its own (this process alone
holds its keys), and it serves every later one. The state directory is kept in the user's
cache directory, not in /tmp (see client._local.private_state_dir). Agents still
run in worker processes with the same isolation as at any place; only the place's own
process is shared. It is stopped, and its state removed, when the process exits.
"""

from __future__ import annotations

import asyncio
import shutil

from ..client import _runtime
from ..client._identity import register_place
from ..client._local import private_state_dir
from ..trust._store import Bundle, TrustStore
from ..trust._tls import client_context
from ._place import Place
from ._settings import PlaceSettings

__all__ = ["embedded_address", "embedded_running"]

_place: Place | None = None
_lock: asyncio.Lock | None = None


async def _start() -> str:
    global _place, _lock
    if _lock is None:
        _lock = asyncio.Lock()
    async with _lock:
        if _place is None:
            state = private_state_dir("embedded")
            # A CA of its own, made in its private state directory and gone with it: the
            # user needs no identity, and nobody else (another local user, an agent) can
            # meet this process's place.
            trust = TrustStore(state / "trust")
            place = Place(PlaceSettings(listen="127.0.0.1:0", state_dir=state, pool_size=1,
                                        trust_dir=trust.root))
            await place.start()
            user = trust.default_identity()
            assert user is not None  # the place made its local identities
            bundle = Bundle.read(trust.find(user))
            register_place(place.address, client_context(bundle), bundle)

            async def stop() -> None:
                try:
                    await place.stop(grace=2)
                finally:  # whatever stopping met at exit, nothing of the place stays
                    shutil.rmtree(state, ignore_errors=True)

            _runtime.on_shutdown(stop)
            _place = place
        return _place.address


def embedded_running() -> bool:
    """Whether this process's embedded place has started (no meet that named no place has
    started it yet, otherwise)."""
    return _place is not None


async def embedded_address() -> str:
    """The embedded place's address, starting it on first use."""
    # Shielded: a caller that gives up (a meet's timeout) must not abort a start half way.
    loop = _runtime.background_loop()
    if asyncio.get_running_loop() is loop:
        return await asyncio.shield(_start())
    return await asyncio.shield(asyncio.wrap_future(
        asyncio.run_coroutine_threadsafe(_start(), loop)))
