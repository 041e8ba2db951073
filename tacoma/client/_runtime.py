"""A background event loop for the blocking API.

`meet()` must work in a plain script and in a notebook cell, where the caller's thread already
runs an event loop and `asyncio.run` is refused. So blocking calls run their coroutine on one
daemon thread's loop (uvloop when installed) and wait for it. The thread lives for the
process, which also keeps its cached connections (and the embedded place) warm between calls.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import queue
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["new_event_loop", "run_blocking"]

T = TypeVar("T")
Q = TypeVar("Q")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_thread: threading.Thread | None = None
_at_exit: list[Callable[[], Awaitable[None]]] = []


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new event loop: uvloop's if it is installed, else asyncio's."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a declared dependency
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


def background_loop() -> asyncio.AbstractEventLoop:
    global _loop, _thread
    with _lock:
        if _loop is None:
            loop = new_event_loop()
            ready = threading.Event()

            def run() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(ready.set)
                loop.run_forever()

            _thread = threading.Thread(target=run, name="tacoma-loop", daemon=True)
            _thread.start()
            ready.wait()
            _loop = loop
            atexit.register(_shutdown)
        return _loop


def on_shutdown(callback: Callable[[], Awaitable[None]]) -> None:
    """Run `callback` on the background loop when the process exits."""
    _at_exit.append(callback)


def _shutdown() -> None:
    loop = _loop
    if loop is None or not loop.is_running():
        return

    async def finish() -> None:
        for callback in reversed(_at_exit):
            # Exiting: a failed clean-up must not stop the next one, and has nobody to tell.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(callback(), 15)

    with contextlib.suppress(Exception):
        asyncio.run_coroutine_threadsafe(finish(), loop).result(timeout=20)
    loop.call_soon_threadsafe(loop.stop)


#: Seconds between a blocked caller's wake-ups (see `result_of`).
WAKE_EVERY = 0.1


def result_of(future: concurrent.futures.Future[T]) -> T:
    """`future.result()`, interruptible by Ctrl-C whichever thread the signal reaches.

    A process-directed SIGINT may be delivered to any thread of the process that does not
    block it (Linux passes over a main thread with a signal already pending, a SIGCHLD of
    the embedded place's workers, say); Python then only sets a flag, and runs the handler
    (KeyboardInterrupt) when the main thread next runs bytecode, which a thread asleep in
    a lock's wait never does: the process ignores Ctrl-C for good. Waking every WAKE_EVERY
    seconds lets it through. (Blocking SIGINT in tacoma's own threads instead would pass
    the blocked mask on to every process they start, agents' workers included.)"""
    while True:
        try:
            return future.result(timeout=WAKE_EVERY)
        except concurrent.futures.TimeoutError:
            if future.done():  # the coroutine's own TimeoutError
                raise


def get_interruptibly(source: queue.SimpleQueue[Q]) -> Q:
    """`source.get()`, interruptible by Ctrl-C as `result_of` is."""
    while True:
        try:
            return source.get(timeout=WAKE_EVERY)
        except queue.Empty:
            continue


def run_blocking(coro: Coroutine[Any, Any, T],
                 wait: Callable[[concurrent.futures.Future[T]], T] | None = None) -> T:
    """Run a coroutine on the background loop and wait for its result (with `wait`, which
    blocks until the future is done, doing the caller's own work meanwhile: drawing a
    progress bar in the caller's thread, where a notebook's output belongs)."""
    loop = background_loop()
    if threading.current_thread() is _thread:
        coro.close()
        raise RuntimeError("blocking tacoma calls cannot run on tacoma's own loop; "
                           "use the async API (await tacoma.ameet(...)) there")
    future = asyncio.run_coroutine_threadsafe(coro, loop)
    try:
        return wait(future) if wait is not None else result_of(future)
    except KeyboardInterrupt:
        future.cancel()
        raise
