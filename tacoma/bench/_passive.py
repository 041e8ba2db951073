"""The passive baseline: a msgpack request/reply echo server with tacoma's framing.

PAN (Nygren, Garland, Kaashoek 1999) measures an active node against a *passive* one doing
the same transport work without running any mobile code: ActiveOverhead =
(t_active - t_passive) / t_passive. This is tacoma's passive node. It speaks what a place
speaks on the wire (a 4-byte big-endian length, then a msgpack body, decoded with the same
options tacoma uses), over the same kind of transport (a uvloop asyncio.Protocol, TCP_NODELAY,
loopback TCP), and answers each request with its decoded-and-re-encoded body. It does no
Hello, no event checking, no briefcase validation and no meet bookkeeping: exactly what the
"active" path adds.

Run as a separate process: `python -m tacoma.bench._passive [--listen HOST:PORT] [--tls
IDENTITY_FILE]` (or `benchmarks/passive_echo.py`). It prints one line, `passive echo
listening on HOST:PORT`, once it accepts connections, and exits with status 0 on SIGTERM or
SIGINT. With `--tls` it speaks mutual TLS 1.3 as a place does (the same contexts,
trust._tls, with a place's identity file): the baseline of a meet over TLS, as plaintext is
of a meet with an --insecure place. Standard library, msgpack and uvloop only (and
tacoma.trust with --tls). `PassiveClient` is its client, for `tacoma bench overhead` and
benchmarks/report.py.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import socket
import ssl
import sys
from pathlib import Path
from typing import Any

import msgpack

#: Same bound as tacoma's default frame limit: a benchmark peer need not accept more.
MAX_FRAME = 64 * 1024 * 1024
HEADER = 4


def encode(obj: object) -> bytes:
    body: bytes = msgpack.packb(obj, use_bin_type=True)
    return len(body).to_bytes(HEADER, "big") + body


def decode(body: bytes) -> object:
    # The options tacoma's protocol core decodes with (ext types refused there; none here).
    return msgpack.unpackb(body, raw=False, use_list=True, strict_map_key=True, timestamp=0)


class FrameBuffer:
    """Splits a byte stream into length-prefixed frames."""

    def __init__(self) -> None:
        self.buffer = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        self.buffer += data
        frames = []
        buf = self.buffer
        while len(buf) >= HEADER:
            size = int.from_bytes(buf[:HEADER], "big")
            if size > MAX_FRAME:
                raise ValueError(f"frame of {size:,} bytes exceeds {MAX_FRAME:,}")
            if len(buf) < HEADER + size:
                break
            frames.append(bytes(buf[HEADER:HEADER + size]))
            del buf[:HEADER + size]
        return frames


def set_nodelay(transport: asyncio.BaseTransport) -> None:
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class EchoProtocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.frames = FrameBuffer()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        set_nodelay(transport)

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        try:
            frames = self.frames.feed(data)
        except ValueError:
            self.transport.close()
            return
        for body in frames:
            self.transport.write(encode(decode(body)))


class PassiveClient(asyncio.Protocol):
    """One connection to the passive server; one request in flight at a time."""

    def __init__(self) -> None:
        self.frames = FrameBuffer()
        self.transport: asyncio.Transport | None = None
        self.reply: asyncio.Future[Any] | None = None

    @classmethod
    async def connect(cls, address: str, context: ssl.SSLContext | None = None
                      ) -> PassiveClient:
        """Connect to the server at `address`: over TLS with `context` (a client's, as
        trust._tls.client_context makes it), else plaintext."""
        host, _, port = address.rpartition(":")
        loop = asyncio.get_running_loop()
        _, client = await loop.create_connection(
            cls, host, int(port), ssl=context,
            server_hostname=host if context is not None else None)
        return client

    async def request(self, obj: object) -> Any:
        """Send `obj` and wait for the server's reply."""
        if self.transport is None or self.transport.is_closing():
            raise ConnectionError("passive server connection is closed")
        self.reply = asyncio.get_running_loop().create_future()
        self.transport.write(encode(obj))
        return await self.reply

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    # -- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        set_nodelay(transport)

    def data_received(self, data: bytes) -> None:
        for body in self.frames.feed(data):
            if self.reply is not None and not self.reply.done():
                self.reply.set_result(decode(body))

    def connection_lost(self, exc: Exception | None) -> None:
        if self.reply is not None and not self.reply.done():
            self.reply.set_exception(ConnectionError(f"passive server hung up: {exc}"))


async def serve(host: str, port: int, identity: str | None = None) -> None:
    loop = asyncio.get_running_loop()
    context = None
    if identity is not None:  # as a place does: its identity, the cluster's CA, TLS 1.3
        from ..trust._store import Bundle
        from ..trust._tls import server_context

        context = server_context(Bundle.read(Path(identity)))
    server = await loop.create_server(EchoProtocol, host, port, reuse_address=True,
                                      ssl=context)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    sockname = server.sockets[0].getsockname()
    print(f"passive echo listening on {sockname[0]}:{sockname[1]}", flush=True)
    await stop.wait()
    # Not wait_closed(): from Python 3.12 it also waits for clients to hang up.
    server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", default="127.0.0.1:0", metavar="HOST:PORT")
    parser.add_argument("--tls", metavar="IDENTITY_FILE",
                        help="speak mutual TLS 1.3 with this place identity file")
    args = parser.parse_args()
    host, _, port = args.listen.rpartition(":")
    try:
        import uvloop
    except ImportError:  # tacoma depends on uvloop; without it, asyncio's loop is fair too
        runner = asyncio.Runner()
    else:
        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    with runner:
        runner.run(serve(host, int(port), args.tls))
    sys.exit(0)


if __name__ == "__main__":
    main()
