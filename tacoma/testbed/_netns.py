"""A testbed of separate hosts on one machine: network namespaces joined by a bridge.

How it works. Each host is a network namespace made with `ip netns add` (so it has a name
under /var/run/netns that `nsenter --net=` can enter) holding one interface, eth0, whose
other end is a port (named after the host) of a bridge. The bridge lives in a namespace of
its own, so that the caller's network gains only one interface: a veth whose other end is
the bridge's `client` port, through which the caller reaches every host. The addresses are
a private /24, 10.77.X.0/24 with X chosen free in the caller's namespace: host hN is
10.77.X.N and the caller 10.77.X.254.

Faults are made where a real network makes them: `cut` takes a host's bridge port down, as
pulling its cable would; `lossy` drops a share of the packets through its eth0 with
nftables inside the host (the kernel this was written on has no netem, so `tc` cannot).

Why it is shaped so. Every name carries the testbed's tag (the pid by default), so
concurrent runs never touch each other's, `close` can remove everything by name (also
after a set-up that failed halfway), and `cleanup_stale` can find what a killed run left
behind. Commands go to `ip` in batches (one process per namespace), which keeps the set-up
of four hosts to a few tens of milliseconds, and each is bounded by a timeout. Hosts are
entered with `nsenter --net`, not `ip netns exec`, which also remounts /sys in a mount
namespace of its own and so hides the cgroup tree a place confines its agents with.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from ..wire._errors import TacomaError

__all__ = ["NETNS_DIR", "Testbed", "TestbedError"]

#: Where `ip netns` keeps the namespaces it names (what nsenter --net= opens).
NETNS_DIR = Path("/var/run/netns")
#: Seconds one ip, nft or nsenter command may take: they take milliseconds, and one that
#: hangs means a broken host, which is better reported than waited on.
COMMAND_TIMEOUT = 10.0
#: The nftables table `lossy` puts into a host.
LOSS_TABLE = "tacoma_testbed"
#: The private /16 the testbeds' /24s are taken from, and the caller's host number in each.
NET_PREFIX = "10.77"
CLIENT_HOST = 254
#: Names a testbed's tag may have: it ends up in interface names, which the kernel limits
#: to 15 characters ("tb-" and the tag).
TAG = re.compile(r"[a-z0-9][a-z0-9-]{0,11}")
#: The tag of a testbed that belongs to a process (`cleanup_stale` removes it once that
#: process is gone): the pid, and a counter for a process's second and later testbeds.
PID_TAG = re.compile(r"(\d+)(?:-\d+)?")
_NAMESPACE = re.compile(r"tacoma-(.+)-(?:br|h\d+)")
_LINK = re.compile(r"tb-(.+)")
_made_here = 0  # testbeds this process has made: the counter in their tags


class TestbedError(TacomaError):
    """A testbed could not be made, changed or removed (what failed, and the command's own
    words, are in the message)."""


def _run(*args: str, stdin: str | None = None) -> str:
    """Run one command (bounded by COMMAND_TIMEOUT): its output, or TestbedError."""
    shown = " ".join(args)
    try:
        # S603: the programs are ip, nft and nsenter, the arguments this module's own.
        done = subprocess.run(args, input=stdin, capture_output=True,  # noqa: S603
                              text=True, timeout=COMMAND_TIMEOUT, check=False)
    except FileNotFoundError:
        raise TestbedError(f"{args[0]} is not installed: a testbed needs ip and nsenter "
                           "(Debian: apt-get install iproute2 util-linux), and nft for "
                           "lossy hosts (apt-get install nftables)") from None
    except subprocess.TimeoutExpired:
        raise TestbedError(f"`{shown}` did not finish in {COMMAND_TIMEOUT:g} s") from None
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip()
        if stdin:
            detail += "\n  its input was:\n    " + stdin.strip().replace("\n", "\n    ")
        raise TestbedError(f"`{shown}` failed: {detail}")
    return done.stdout


def _ip_batch(lines: list[str], namespace: str | None = None, force: bool = False) -> None:
    """Run `ip` commands in one process (in `namespace`, if given); `force` goes on past a
    failed line (for removing what may be gone already)."""
    args = ["ip", *(["-n", namespace] if namespace else []), *(["-force"] if force else []),
            "-batch", "-"]
    _run(*args, stdin="\n".join(lines) + "\n")


def _namespaces() -> set[str]:
    try:
        return set(os.listdir(NETNS_DIR))
    except FileNotFoundError:
        return set()


def _links() -> set[str]:
    """The interfaces of the caller's network namespace."""
    return {name for _, name in socket.if_nameindex()}


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: alive all the same
    return True


class Testbed:
    """N hosts, each a network namespace, on a bridge the caller reaches too.

    `Testbed(hosts=4)` names them; `up()` (or `with Testbed(4) as bed:`) makes them, and
    `close()` removes all of it. As root, with ip and nsenter (see `available`).
    """

    __test__ = False  # not a test class, to pytest, whatever its name says

    def __init__(self, hosts: int = 4, *, tag: str | None = None,
                 net: int | None = None) -> None:
        """`tag` names this testbed's namespaces and link (default: from the pid, unique in
        this process; a tag of digits is taken for a pid by `cleanup_stale`); `net` is X of
        10.77.X.0/24 (default: one free here, chosen at up)."""
        if not 1 <= hosts < CLIENT_HOST:
            raise ValueError(f"a testbed has 1 to {CLIENT_HOST - 1} hosts, not {hosts}")
        if tag is not None and not TAG.fullmatch(tag):
            raise ValueError(f"testbed tag {tag!r}: expected 1 to 12 of a-z, 0-9 and -, "
                             "starting with a letter or digit")
        if net is not None and not 0 <= net <= 255:
            raise ValueError(f"net {net}: X of {NET_PREFIX}.X.0/24 is 0 to 255")
        self._count = hosts
        self._tag = tag
        self._net = net
        self._made = False  # true once up() has claimed the names: close() removes them

    # ------------------------------------------------------------------------- what it is
    @property
    def hosts(self) -> list[str]:
        """The hosts' names: h1, h2, ..."""
        return [f"h{n}" for n in range(1, self._count + 1)]

    @property
    def tag(self) -> str:
        """What every name of this testbed carries (known once it is up)."""
        if self._tag is None:
            raise TestbedError("this testbed is not up: its names are chosen by up()")
        return self._tag

    @property
    def subnet(self) -> str:
        """The hosts' network, 10.77.X.0/24."""
        return f"{self._prefix()}.0/24"

    @property
    def client_address(self) -> str:
        """The caller's address on the bridge."""
        return f"{self._prefix()}.{CLIENT_HOST}"

    @property
    def client_link(self) -> str:
        """The caller's interface into the bridge."""
        return f"tb-{self.tag}"

    @property
    def bridge_namespace(self) -> str:
        """The name of the namespace holding the bridge (br0, one port per host)."""
        return f"tacoma-{self.tag}-br"

    def address(self, host: str) -> str:
        """The host's IP address."""
        return f"{self._prefix()}.{self._number(host)}"

    def namespace(self, host: str) -> str:
        """The name of the host's network namespace (under /var/run/netns)."""
        self._number(host)
        return f"tacoma-{self.tag}-{host}"

    def prefix(self, host: str) -> tuple[str, ...]:
        """The command that runs what follows it in the host: ("nsenter", "--net=...")."""
        return ("nsenter", f"--net={NETNS_DIR / self.namespace(host)}")

    def record(self) -> dict[str, Any]:
        """What this testbed is, as JSON-ready data (`from_record` gives it back)."""
        return {"tag": self.tag, "net": self._net, "subnet": self.subnet,
                "client": {"link": self.client_link, "address": self.client_address},
                "bridge": self.bridge_namespace,
                "hosts": {h: {"namespace": self.namespace(h), "address": self.address(h)}
                          for h in self.hosts}}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Self:
        """The testbed a `record()` describes, as made (so `close` removes it)."""
        bed = cls(len(record["hosts"]), tag=record["tag"], net=record["net"])
        bed._made = True
        return bed

    # --------------------------------------------------------------------- making, removing
    @staticmethod
    def available(loss: bool = False) -> tuple[bool, str]:
        """Whether testbeds can be made here, and if not, why (with `loss`: lossy hosts)."""
        if os.geteuid() != 0:
            return False, "a testbed needs root (network namespaces)"
        needed = ["ip", "nsenter", *(["nft"] if loss else [])]
        missing = [name for name in needed if shutil.which(name) is None]
        if missing:
            return False, (f"a testbed needs {', '.join(missing)} (Debian: apt-get install "
                           "iproute2 util-linux nftables)")
        return True, ""

    def up(self) -> Self:
        """Make the namespaces, the bridge and the links; on failure remove what was made."""
        if self._made:
            raise TestbedError(f"testbed {self.tag} is up already")
        ok, why = self.available()
        if not ok:
            raise TestbedError(why)
        self._tag = self._tag or self._free_tag()
        self._check_names_free()
        self._net = self._net if self._net is not None else self._free_net()
        self._made = True
        try:
            self._make()
        except BaseException:
            self.close()
            raise
        return self

    def _make(self) -> None:
        bridge = self.bridge_namespace
        net = self.subnet.rsplit(".", 1)[0]
        lines = [f"netns add {bridge}", *(f"netns add {self.namespace(h)}" for h in self.hosts)]
        # Each veth is made with its ends already in their namespaces: the names inside
        # are private to those, and only the caller's end needs a name unique here.
        lines += [f"link add {h} netns {bridge} type veth peer name eth0 netns "
                  f"{self.namespace(h)}" for h in self.hosts]
        lines += [f"link add {self.client_link} type veth peer name client netns {bridge}",
                  f"addr add {self.client_address}/24 dev {self.client_link}",
                  f"link set {self.client_link} up"]
        _ip_batch(lines)
        _ip_batch(["link add br0 type bridge", "link set br0 up",
                   *(f"link set {port} master br0 up" for port in [*self.hosts, "client"])],
                  bridge)
        for host in self.hosts:
            _ip_batch([f"addr add {net}.{self._number(host)}/24 dev eth0",
                       "link set eth0 up", "link set lo up"], self.namespace(host))

    def close(self) -> None:
        """Remove everything this testbed made (what is gone already is no error)."""
        if not self._made:
            return
        self._made = False
        lines = []
        if self.client_link in _links():
            lines.append(f"link del {self.client_link}")
        # The bridge last: the veths die with whichever end's namespace goes first.
        for namespace in [*(self.namespace(h) for h in self.hosts), self.bridge_namespace]:
            if namespace in _namespaces():
                lines.append(f"netns del {namespace}")
        if lines:
            try:
                _ip_batch(lines, force=True)
            except TestbedError:
                left = self.leftovers()
                if left:
                    raise TestbedError(f"could not remove {', '.join(left)} of testbed "
                                       f"{self.tag}; remove them with `ip netns del NAME` "
                                       "and `ip link del NAME`") from None

    def leftovers(self) -> list[str]:
        """The namespaces and links of this testbed that exist now."""
        names = {*(self.namespace(h) for h in self.hosts), self.bridge_namespace}
        return sorted((names & _namespaces()) | ({self.client_link} & _links()))

    @staticmethod
    def cleanup_stale() -> list[str]:
        """Remove the namespaces and links of testbeds whose process has ended (a run that
        was killed before its close): what was removed."""
        lines = []
        for namespace in sorted(_namespaces()):
            match = _NAMESPACE.fullmatch(namespace)
            if match and _stale(match.group(1)):
                lines.append(f"netns del {namespace}")
        for link in sorted(_links()):
            match = _LINK.fullmatch(link)
            if match and _stale(match.group(1)):
                lines.append(f"link del {link}")
        if lines:
            # Links first: a namespace's deletion may take its peer's link with it.
            lines.sort(key=lambda line: not line.startswith("link"))
            # Whatever could not go is left out of what this returns, and listed by the next
            # look; one failed line does not stop the others (-force).
            with contextlib.suppress(TestbedError):
                _ip_batch(lines, force=True)
        left = _namespaces() | _links()
        return [name for name in (line.split()[-1] for line in lines) if name not in left]

    def __enter__(self) -> Self:
        return self.up()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        if not self._made:
            return f"<Testbed of {self._count} hosts, not up>"
        return f"<Testbed {self.tag}: {self._count} hosts on {self.subnet}>"

    # ------------------------------------------------------------------------------ faults
    def cut(self, host: str) -> None:
        """Disconnect the host: its port on the bridge goes down, as if its cable were
        pulled (its own eth0 stays configured; nothing reaches it or leaves it)."""
        _run("ip", "-n", self.bridge_namespace, "link", "set", self._port(host), "down")

    def restore(self, host: str) -> None:
        """Connect a cut host again."""
        _run("ip", "-n", self.bridge_namespace, "link", "set", self._port(host), "up")

    def is_cut(self, host: str) -> bool:
        """Whether the host's port on the bridge is down."""
        shown = _run("ip", "-n", self.bridge_namespace, "-o", "link", "show",
                     self._port(host))
        flags = shown.split("<", 1)[1].split(">", 1)[0].split(",")
        return "UP" not in flags

    def lossy(self, host: str, percent: int = 30) -> None:
        """Drop `percent` of the packets the host receives and of those it sends on eth0
        (so a round trip is lost 1 - (1 - p)^2 of the time). Replaces an earlier loss."""
        if not 0 <= percent <= 100:
            raise ValueError(f"loss of {percent}%: expected 0 to 100")
        rule = f"numgen random mod 100 < {int(percent)} drop"
        self._nft(host, f"""
            table inet {LOSS_TABLE}
            delete table inet {LOSS_TABLE}
            table inet {LOSS_TABLE} {{
                chain incoming {{ type filter hook input priority 0; iifname "eth0" {rule}; }}
                chain outgoing {{ type filter hook output priority 0; oifname "eth0" {rule}; }}
            }}
        """)

    def clear_loss(self, host: str) -> None:
        """Stop dropping the host's packets (no error if it was not lossy)."""
        self._nft(host, f"table inet {LOSS_TABLE}\ndelete table inet {LOSS_TABLE}\n")

    def _nft(self, host: str, script: str) -> None:
        if shutil.which("nft") is None:
            raise TestbedError("nft not found: lossy hosts need nftables (Debian: apt-get "
                               "install nftables)")
        self._require_up()
        # The first two lines of each script make the table if need be, so that deleting
        # it cannot fail: the whole script is one transaction either way.
        _run(*self.prefix(host), "nft", "-f", "-", stdin=script)

    # ----------------------------------------------------------------------------- helpers
    def _number(self, host: str) -> int:
        match = re.fullmatch(r"h([1-9]\d*)", host)
        if not match or int(match.group(1)) > self._count:
            raise ValueError(f"no host {host!r} in this testbed: its hosts are h1 to "
                             f"h{self._count}")
        return int(match.group(1))

    def _port(self, host: str) -> str:
        self._number(host)
        self._require_up()
        return host

    def _require_up(self) -> None:
        if not self._made:
            raise TestbedError("this testbed is not up: call up() (or use it in a with "
                               "block) first")

    def _prefix(self) -> str:
        if self._net is None:
            raise TestbedError("this testbed is not up: its subnet is chosen by up()")
        return f"{NET_PREFIX}.{self._net}"

    @staticmethod
    def _free_tag() -> str:
        """The pid, with a counter for this process's second and later testbeds, skipping
        names taken (by a process of another pid namespace, say)."""
        global _made_here
        while True:
            tag = str(os.getpid()) + (f"-{_made_here}" if _made_here else "")
            _made_here += 1
            if not Testbed(1, tag=tag)._taken():
                return tag

    def _taken(self) -> bool:
        return any(n.startswith(f"tacoma-{self.tag}-") for n in _namespaces()) or \
            self.client_link in _links()

    def _check_names_free(self) -> None:
        if self._taken():
            raise TestbedError(f"testbed {self.tag} exists already (a namespace "
                               f"tacoma-{self.tag}-... or link {self.client_link}): remove "
                               "it first, or choose another tag")

    @staticmethod
    def _free_net() -> int:
        """X of the first 10.77.X.0/24 (from one the pid picks) no address or route here
        uses."""
        used = _run("ip", "-o", "-4", "addr", "show") + _run("ip", "-4", "route", "show")
        start = os.getpid() % 200 + 20
        for x in ((start + step) % 256 for step in range(256)):
            if not re.search(rf"\b{re.escape(f'{NET_PREFIX}.{x}.')}\d", used):
                return x
        raise TestbedError(f"every {NET_PREFIX}.X.0/24 is in use here: remove old "
                           "testbeds (tacoma testbed down, or Testbed.cleanup_stale())")


def _stale(tag: str) -> bool:
    match = PID_TAG.fullmatch(tag)
    return match is not None and not _pid_alive(int(match.group(1)))
