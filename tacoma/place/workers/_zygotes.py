"""The place's end of a language's zygote: start it, ask it to fork workers, hear of exits.

The zygote itself (agent._zygote) is an interpreter started once per language, warmed up
and never given an agent; it forks one worker per request, so a busy place does not spend
its CPUs starting interpreters. This side speaks its control protocol: spawn requests with
the worker's descriptors attached, and the zygote's replies (ready, spawned, exited), read
by a reader callback on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
from pathlib import Path
from typing import Any

import msgpack

from ...agent._interpreter import Interpreter
from ...agent._plan import Namespaces, SandboxPlan, ZygotePlan
from ...agent._zygote import MAX_CONTROL
from ...wire._errors import PlaceUnavailable
from ._containment import tail

__all__ = ["START_TIMEOUT", "ZygoteHandle"]

log = logging.getLogger("tacoma.place")

#: How long a new zygote or worker may take to start and say it is ready.
START_TIMEOUT = 30.0


class ZygoteHandle:
    """The place's end of a language's zygote (agent._zygote, the other end): it forks
    the workers.

    Started once per pool by exec'ing the interpreter's worker command; thereafter a worker
    costs a fork and the sandbox set-up instead of an exec and an interpreter start.
    """

    def __init__(self, interpreter: Interpreter, work_dir: Path,
                 namespaces: Namespaces) -> None:
        self.interpreter = interpreter
        self.namespaces = namespaces  # what the zygote enters for all its workers
        self.work_dir = work_dir
        self.proc: asyncio.subprocess.Process | None = None
        self.sock: socket.socket | None = None
        self.output = work_dir / f"zygote-{interpreter.language}.out"
        self._ready: asyncio.Future[None] | None = None
        self._spawning: dict[int, asyncio.Future[int]] = {}
        self._exits: dict[int, asyncio.Future[int]] = {}
        self.cpu_used: dict[int, float] = {}  # by worker pid, once it ended
        self._ids = 0
        self.dead = False

    @property
    def alive(self) -> bool:
        return self.proc is not None and not self.dead

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ours.setblocking(False)
        self.sock = ours
        self._ready = loop.create_future()
        plan = ZygotePlan(parent=os.getpid(), control_fd=theirs.fileno(),
                          namespaces=self.namespaces)
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
        try:
            with open(self.output, "wb") as out:
                self.proc = await asyncio.create_subprocess_exec(
                    *self.interpreter.worker_argv(), json.dumps(plan.to_wire()),
                    pass_fds=(theirs.fileno(),), cwd=self.work_dir, env=env,
                    stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out,
                    start_new_session=True)
        except (OSError, LookupError) as exc:
            ours.close()
            raise PlaceUnavailable(f"cannot start the {self.interpreter.language} "
                                   f"interpreter: {exc}") from exc
        finally:
            theirs.close()
        loop.add_reader(ours.fileno(), self._readable)
        exited: asyncio.Future[Any] = asyncio.ensure_future(self.proc.wait())
        try:
            await asyncio.wait({self._ready, exited}, timeout=START_TIMEOUT,
                               return_when=asyncio.FIRST_COMPLETED)
            if self._ready.done() and self._ready.exception() is not None:
                raise self._ready.exception()  # type: ignore[misc]
            if not self._ready.done():
                raise PlaceUnavailable(f"the {self.interpreter.language} interpreter did "
                                       "not start", tail(self.output))
        except BaseException:  # not started, or the meet waiting for it was cancelled
            await asyncio.shield(self.close())
            raise
        finally:
            exited.cancel()

    async def spawn(self, plan: SandboxPlan,
                    fds: list[int]) -> tuple[int, asyncio.Future[int]]:
        """Fork a worker with this plan and descriptors: its pid and a future of its exit."""
        if not self.alive or self.sock is None:
            raise PlaceUnavailable(f"the {self.interpreter.language} zygote is not running")
        self._ids += 1
        request = self._ids
        spawned = asyncio.get_running_loop().create_future()
        self._spawning[request] = spawned
        message = msgpack.packb({"op": "spawn", "id": request, "plan": plan.to_wire()},
                                use_bin_type=True)
        try:
            while True:
                try:
                    socket.send_fds(self.sock, [message], fds)
                    break
                except BlockingIOError:  # the zygote is behind: wait until it reads
                    await asyncio.sleep(0.001)
            pid = await asyncio.wait_for(spawned, START_TIMEOUT)
        except TimeoutError:
            raise PlaceUnavailable(f"the {self.interpreter.language} zygote did not fork a "
                                   f"worker within {START_TIMEOUT:g} s") from None
        finally:
            self._spawning.pop(request, None)
        exit_future = self._exits.get(pid)
        if exit_future is None:  # the zygote died, and the worker with it, as it reported
            raise PlaceUnavailable(f"the {self.interpreter.language} zygote died")
        return pid, exit_future

    def _readable(self) -> None:
        assert self.sock is not None
        while True:
            try:
                data = self.sock.recv(MAX_CONTROL)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self._died()
                return
            message = msgpack.unpackb(data, raw=False)
            op = message.get("op")
            if op == "ready" and self._ready is not None and not self._ready.done():
                self._ready.set_result(None)
            elif op == "failed" and self._ready is not None and not self._ready.done():
                self._ready.set_exception(PlaceUnavailable(
                    f"the {self.interpreter.language} zygote cannot start: "
                    f"{message.get('message', '')}"))
            elif op == "spawn-failed":
                future = self._spawning.get(int(message["id"]))
                if future is not None and not future.done():
                    future.set_exception(PlaceUnavailable(
                        f"the {self.interpreter.language} zygote cannot fork a worker: "
                        f"{message.get('message', '')}"))
            elif op == "spawned":
                pid = int(message["pid"])
                self._exits[pid] = asyncio.get_running_loop().create_future()
                future = self._spawning.get(int(message["id"]))
                if future is not None and not future.done():
                    future.set_result(pid)
            elif op == "exited":
                self.cpu_used[int(message["pid"])] = float(message.get("cpu", 0.0))
                exit_future = self._exits.pop(int(message["pid"]), None)
                if exit_future is not None and not exit_future.done():
                    exit_future.set_result(int(message["status"]))

    def _died(self, expected: bool = False) -> None:
        """The zygote is gone, and with it (parent-death signal) every worker it forked."""
        if self.dead:
            return
        self.dead = True
        if self.sock is not None:
            asyncio.get_running_loop().remove_reader(self.sock.fileno())
            self.sock.close()
        for future in self._spawning.values():
            if not future.done():
                future.set_exception(PlaceUnavailable(
                    f"the {self.interpreter.language} zygote died", tail(self.output)))
        for future in self._exits.values():
            if not future.done():
                future.set_result(-signal.SIGKILL)
        self._exits.clear()
        if not expected:
            log.warning("the %s zygote ended; a new one starts with the next worker",
                        self.interpreter.language)

    async def close(self) -> None:
        self._died(expected=True)
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            await self.proc.wait()
        with contextlib.suppress(OSError):
            self.output.unlink()
