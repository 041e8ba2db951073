"""Place addresses and meet targets, parsed the same way by the client, the place and the CLI."""

from __future__ import annotations

__all__ = ["canonical_address", "parse_address", "split_target"]


def parse_address(address: str, listen: bool = False) -> tuple[str, int]:
    """`host:port` or `[v6]:port` to (host, port); ValueError says what is expected.

    Port 0 (any free port) is allowed only for an address to listen on.
    """
    host, sep, port = address.rpartition(":")
    lowest = 0 if listen else 1
    if (not sep or not host or not (port.isascii() and port.isdigit())
            or not lowest <= int(port) < 65536):
        raise ValueError(f"bad place address {address!r}: expected HOST:PORT, "
                         "e.g. 127.0.0.1:7707")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def canonical_address(address: str) -> str:
    """The one spelling of a place's address (`127.0.0.1:07707` is `127.0.0.1:7707`, an
    IPv6 host in brackets, a name in lower case), so that one place is one connection."""
    host, port = parse_address(address)
    host = host.lower()
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def split_target(target: str) -> tuple[str, str | None]:
    """`agent@place` -> (agent, place); a bare `agent` -> (agent, None)."""
    agent, sep, place = target.partition("@")
    if not agent or (sep and not place):
        raise ValueError(f"bad meet target {target!r}: expected AGENT@HOST:PORT or AGENT")
    return agent, (place or None)
