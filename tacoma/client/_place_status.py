"""A place in one screen: `place_status(PLACE)`, the face of `tacoma status PLACE`.

The place sums itself up in one ag_admin meet (operation `status`, place.taking._builtins): its
address, version and uptime, the sandbox layers it applies, a worker pool per language,
its meets (running, queued, ended), its resident agents and their mailboxes, its cabinets.
Like `tacoma ps` it is for the place's administrator: an identity with the admin role (the
user's own local one is), or the place's admin token (`token=`; the CLI reads it from the
place's state directory).

`PlaceStatus` is a value: `str()` is the summary as the CLI prints it, `repr()` one short
line, and a notebook shows it as tables (`_repr_html_`). Every string in it is what the
place chose to say, escape sequences included: each view escapes it (wire._text.escape; the
tables through tacoma.display), and `data` keeps it exact.
"""

from __future__ import annotations

import datetime
import io
import json
import sys
from dataclasses import dataclass, field, fields
from typing import IO, Any

from ..display import human_duration, human_size
from ..wire._briefcase import Briefcase
from ..wire._errors import RemoteProtocolError
from ..wire._names import ADMIN_AGENT
from ..wire._text import escape
from ._client import connection, meet_deadline, place_of

__all__ = ["PlaceStatus", "aplace_status", "place_status"]


@dataclass(frozen=True, slots=True)
class Layer:
    """A layer of the sandbox, and whether the place applies it (if not: why)."""

    name: str
    applied: bool
    detail: str


@dataclass(frozen=True, slots=True)
class Pool:
    """The workers of one language: ready now, kept ready now (from --pool-size, growing
    under load up to `most`, --pool-max), meets that ran in one and ended since the place
    started, and meets that found none ready; warm workers idle now (kept for later meets
    of the same principal and program, or of the same principal where each meet is a fresh
    instance: `Interpreter.instances`), and of the meets that ended, how many a warm
    worker served and how many a fresh one."""

    agent: str
    language: str
    ready: int
    size: int
    ended: int
    most: int = 0
    misses: int = 0
    idle_warm: int = 0
    warm: int = 0
    fresh: int = 0
    #: Where its meets run: "workers" (confined worker processes), or "place": on threads
    #: of the place's own process (--instances-in-place), at most `at_once` at a time.
    runs_in: str = "workers"
    at_once: int = 0


_POOL_FIELDS = frozenset(f.name for f in fields(Pool))


@dataclass(frozen=True, slots=True)
class Resident:
    """A resident agent: its name, agent, meet, and mailbox (messages and bytes waiting;
    messages received since it became resident)."""

    name: str
    agent: str
    meet: str
    messages: int
    bytes: int
    received: int
    age: float


@dataclass(frozen=True, slots=True)
class Programs:
    """What a place did with programs named by hash since it started (see place.stores._codes)."""

    programs: int = 0
    bytes: int = 0
    named: int = 0
    asked: int = 0
    saved: int = 0


@dataclass(frozen=True, slots=True)
class PlaceStatus:
    """What a place says of itself (see the module's header). `data` is the place's answer
    as it came (the JSON of `tacoma status PLACE --json`)."""

    address: str
    version: str
    pid: int
    started: float  # time.time() at the place when it started
    uptime: float  # seconds, as the place counted them (no clock of ours involved)
    state_dir: str
    agent_network: str
    layers: tuple[Layer, ...]
    pools: tuple[Pool, ...]
    unavailable: tuple[str, ...]  # languages installed here that cannot run at the place
    installed: tuple[str, ...]  # agents installed at the place (tacoma install)
    running: int  # meets running now (the place's own always-served agents not counted)
    queued: int  # async meets waiting for a slot
    ended: int  # meets whose agent ran in a worker and ended, since the place started
    max_meets: int
    max_queued: int
    residents: tuple[Resident, ...]
    mailbox_bytes: int  # bytes of messages waiting, all residents together
    mailbox_max_bytes: int  # --mailbox-total-bytes
    cabinets: int
    #: Programs named by hash (CODE_HASH): kept, bytes kept, meets that named theirs and
    #: found it, meets whose program was asked for, and bytes of programs not sent.
    programs: Programs = field(default_factory=lambda: Programs())
    #: Agents installed with --trusted, run in the place's process: (name, meets since the
    #: place loaded it, why it cannot be loaded or "").
    trusted: tuple[tuple[str, int, str], ...] = ()
    #: The host's 1-minute load average and its cores, and the CPU rate of each agent there
    #: (--cpus): what a meet competes for (tacoma advise).
    load: float = 0.0
    cpus: int = 1
    agent_cpus: float = 1.0
    #: Lazy folders' data it keeps for its agents (folders, bytes) and relays for clients.
    lazy: dict[str, int] = field(default_factory=dict)
    #: Whether it reuses workers (--reuse: "same-program" or "never"), whether it can here,
    #: and its idle warm workers now and at most.
    reuse: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PlaceStatus:
        meets, mail = data["meets"], data["mailboxes"]
        return cls(
            address=data["address"], version=data["version"], pid=data["pid"],
            started=data["started"], uptime=data["uptime"], state_dir=data["state_dir"],
            agent_network=data["agent_network"],
            layers=tuple(Layer(r["layer"], r["applied"], r["detail"]) for r in data["layers"]),
            # A newer place may say more of a pool than this client knows: what it knows.
            pools=tuple(Pool(**{k: v for k, v in r.items() if k in _POOL_FIELDS})
                        for r in data["pools"]),
            unavailable=tuple(data["unavailable"]), installed=tuple(data["installed"]),
            running=meets["running"], queued=meets["queued"], ended=meets["ended"],
            max_meets=meets["max_meets"], max_queued=meets["max_queued"],
            residents=tuple(Resident(**r) for r in data["residents"]),
            mailbox_bytes=mail["bytes"], mailbox_max_bytes=mail["max_bytes"],
            cabinets=data["cabinets"], programs=Programs(**data.get("programs", {})),
            trusted=tuple((t["name"], t["meets"], t["problem"])
                          for t in data.get("trusted", [])),
            load=data.get("host", {}).get("load", 0.0),
            cpus=data.get("host", {}).get("cpus", 1),
            agent_cpus=data.get("host", {}).get("agent_cpus", 1.0),
            lazy=data.get("lazy", {}), reuse=data.get("reuse", {}), data=data)

    # ------------------------------------------------------------------ for people
    def _facts(self) -> list[tuple[str, str]]:
        """The summary's lines before its tables: (label, text)."""
        since = datetime.datetime.fromtimestamp(self.started).astimezone()
        applied = [layer.name for layer in self.layers if layer.applied]
        missing = [f"{layer.name} ({layer.detail})" for layer in self.layers
                   if not layer.applied]
        facts = [
            ("place", f"{self.address}, tacoma {self.version}, pid {self.pid}"),
            ("up", f"{human_duration(self.uptime)} (since {since:%Y-%m-%d %H:%M:%S %Z})"),
            ("state", self.state_dir),
            ("isolation", ", ".join(applied) or "none"),
        ]
        if missing:
            facts.append(("not applied", "; ".join(missing)))
        facts += [
            ("network", "none (agents reach only their place)" if self.agent_network == "none"
             else "the host's (--agent-network host)"),
            ("workers", self._workers()),
            ("meets", f"{self.running} running (at most {self.max_meets}), {self.queued} "
                      f"queued (at most {self.max_queued}), {self.ended} ended since start"),
            ("mailboxes", f"{sum(r.messages for r in self.residents)} messages, "
                          f"{human_size(self.mailbox_bytes)} waiting (at most "
                          f"{human_size(self.mailbox_max_bytes)} at the place)"),
            ("host", f"load {self.load:g} on {self.cpus} cores; each agent gets "
                     f"{self.agent_cpus:g} of a core"),
            ("lazy folders", f"{self.lazy.get('kept', 0)} kept for agents "
                             f"({human_size(self.lazy.get('bytes', 0))}), "
                             f"{self.lazy.get('relayed', 0)} relayed for clients"),
            ("cabinets", str(self.cabinets)),
            ("programs", f"{self.programs.programs} kept by hash "
                         f"({human_size(self.programs.bytes)}); {self.programs.named} meets "
                         f"named theirs, {self.programs.asked} were asked for theirs, "
                         f"{human_size(self.programs.saved)} not sent"),
        ]
        in_place = [p for p in self.pools if p.runs_in == "place"]
        if in_place:
            facts.append(("in its process", "; ".join(
                f"{p.agent} instances (at most {p.at_once} at once)" for p in in_place)
                + " (--instances-in-place: their runtime is their only wall)"))
        if self.installed:
            facts.append(("installed", ", ".join(self.installed)))
        if self.trusted:
            facts.append(("trusted", "; ".join(
                f"{name} (cannot load: {problem})" if problem else f"{name} ({meets} meets)"
                for name, meets, problem in self.trusted) + " (in the place's process)"))
        if self.unavailable:
            facts.append(("cannot run", ", ".join(self.unavailable) + " (tacoma doctor says "
                                                                       "why)"))
        return facts

    def _workers(self) -> str:
        """Whether and how it reuses workers, in words."""
        reuse = self.reuse
        if reuse.get("setting") == "never":
            return "a fresh process for every meet (--reuse never)"
        if not reuse.get("applies"):
            return ("a fresh process for every meet (reuse needs a PID namespace, a tmpfs "
                    "and cgroups per worker, and principals: a place run as root, not "
                    "--insecure)")
        return (f"reused for later meets of the same principal and program (fresh "
                f"instances: of any of its programs); "
                f"{reuse.get('idle', 0)} warm idle (at most {reuse.get('most', 0)})")

    POOL_HEADERS = ("LANGUAGE", "AGENT", "READY", "POOL", "MOST", "ENDED", "MISSED", "WARM",
                    "SERVED WARM", "FRESH")
    RESIDENT_HEADERS = ("RESIDENT", "AGENT", "MEET", "MESSAGES", "BYTES", "RECEIVED", "AGE")

    def _pool_rows(self) -> list[tuple[object, ...]]:
        return [(p.language, p.agent, p.ready, p.size, p.most, p.ended, p.misses, p.idle_warm,
                 p.warm, p.fresh) for p in self.pools]

    def _resident_rows(self) -> list[tuple[object, ...]]:
        return [(r.name, r.agent, r.meet, r.messages, human_size(r.bytes), r.received,
                 human_duration(r.age)) for r in self.residents]

    def show(self, file: IO[str] | None = None) -> None:
        """Print the summary (on stdout, or `file`), its pools and residents as tables."""
        from ..display import table  # rich: only for whoever prints

        out = file if file is not None else sys.stdout
        facts = self._facts()
        width = max(len(label) for label, _ in facts)
        out.write("".join(f"{label:<{width}}  {escape(text)}\n" for label, text in facts)
                  + "\n")
        out.flush()  # rich writes the tables past any buffer of ours
        table(self.POOL_HEADERS, self._pool_rows(),
              right=("READY", "POOL", "MOST", "ENDED", "MISSED", "WARM", "SERVED WARM",
                     "FRESH"), file=out)
        out.write("\n")
        if self.residents:
            table(self.RESIDENT_HEADERS, self._resident_rows(),
                  right=("MESSAGES", "BYTES", "RECEIVED", "AGE"), file=out)
        else:
            out.write("no resident agents\n")

    def __str__(self) -> str:
        out = io.StringIO()
        self.show(out)
        return out.getvalue().rstrip("\n")

    def __repr__(self) -> str:
        return escape(f"PlaceStatus({self.address}, tacoma {self.version}, up "
                      f"{human_duration(self.uptime)}, {self.running} running, "
                      f"{self.queued} queued, {self.ended} ended, "
                      f"{len(self.residents)} residents)")

    def _repr_html_(self) -> str:
        from ..display import html_table, html_text

        facts = "".join(f"<tr><th style='text-align:left'>{html_text(label)}</th>"
                        f"<td style='text-align:left'>{html_text(text)}</td></tr>"
                        for label, text in self._facts())
        parts = [f"<table>{facts}</table>",
                 html_table(self.POOL_HEADERS, self._pool_rows(), caption="worker pools")]
        if self.residents:
            parts.append(html_table(self.RESIDENT_HEADERS, self._resident_rows(),
                                    caption="resident agents"))
        return "<div>" + "".join(parts) + "</div>"


async def aplace_status(place: str | None = None, *, token: str | None = None,
                        connect_timeout: float | None = 10.0,
                        timeout: float = 30.0) -> PlaceStatus:
    """The status of the place at `place` (HOST:PORT; None: the default place, tacoma's
    embedded one). Needs an identity with the admin role, or the place's admin `token`
    (NotAllowed otherwise)."""
    _, address = await place_of(f"{ADMIN_AGENT}@{place}" if place else ADMIN_AGENT)
    request = Briefcase(OP=["status"], TOKEN=[token] if token else [])
    async with meet_deadline(timeout, f"place {address} did not say its status") as deadline:
        client = await connection(address, connect_timeout, deadline.until)
        answer = await client.meet(ADMIN_AGENT, request, "sync", timeout)
    assert isinstance(answer, Briefcase)
    try:
        data: dict[str, Any] = json.loads(answer.folder("STATUS")[0])
        return PlaceStatus.from_json(data)
    except (ValueError, LookupError, TypeError, AttributeError) as exc:
        # A place's words: a broken or hostile one gets a protocol error, not a traceback.
        raise RemoteProtocolError(f"place {address} sent a status tacoma cannot read "
                                  f"({type(exc).__name__}: {exc})") from None


def place_status(place: str | None = None, *, token: str | None = None,
                 connect_timeout: float | None = 10.0, timeout: float = 30.0) -> PlaceStatus:
    """Blocking `aplace_status`."""
    from ._runtime import run_blocking

    answer: PlaceStatus = run_blocking(aplace_status(place, token=token,
                                                     connect_timeout=connect_timeout,
                                                     timeout=timeout))
    return answer
