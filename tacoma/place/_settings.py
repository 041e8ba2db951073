"""Settings of a place: where it listens and keeps state, its pool, and its agents' limits.

Frozen values, checked when built, so a bad setting fails at start-up with a message naming
it rather than in the middle of a meet. The CLI and the Python API build the same objects.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path

import platformdirs

from ..wire._protocol import DEFAULT_MAX_FRAME, HANDSHAKE_TIMEOUT, HELLO_TIMEOUT, IDLE_SECONDS

__all__ = ["AGENT_NETWORKS", "DEFAULT_LISTEN", "REUSE", "Limits", "PlaceSettings", "TripTimings",
           "default_state_dir"]

DEFAULT_LISTEN = "127.0.0.1:7707"
#: What network agents get: none (an empty network namespace), or the host's.
AGENT_NETWORKS = ("none", "host")
#: Whether a place reuses a worker: for later meets of the same principal and program
#: (warm workers, place.workers._warm), or never (a fresh process for every meet).
REUSE = ("same-program", "never")
#: The most workers a pool grows to under load, by default (a ready Python worker holds about
#: 2.5 MB of its own memory, a Scheme one about 10 MB).
POOL_MAX = 16


def default_state_dir() -> Path:
    """$TACOMA_STATE_DIR, else the user's data directory for tacoma (~/.local/share/tacoma)."""
    chosen = os.environ.get("TACOMA_STATE_DIR")
    if chosen:
        return Path(chosen).expanduser()
    return Path(platformdirs.user_data_dir("tacoma", appauthor=False))


@dataclass(frozen=True, slots=True)
class Limits:
    """Resource limits applied to every agent: to each of its processes (POSIX rlimits), and
    to all of them together (its cgroups and its tmpfs), as the place's layers allow.

    cpu_seconds: CPU time of each agent process (past it the kernel sends SIGXCPU), and of
        all of them together (the place kills the agent).
    memory_bytes: address space of each process (RLIMIT_AS: allocations past it fail with
        MemoryError), and memory of all of them together (a memory cgroup: past it the
        kernel kills one of them), its tmpfs included.
    file_bytes: largest file the agent may write (RLIMIT_FSIZE), its stdout and stderr too.
    disk_bytes: everything the agent writes, in its working directory, /tmp, /var/tmp and
        /dev/shm together (one tmpfs of this size, gone with the agent).
    cpus: the CPU rate of the agent, in cores (a CPU cgroup's quota).
    open_files: file descriptors (RLIMIT_NOFILE).
    processes: processes and threads the agent may have at once (a pids cgroup as root,
        RLIMIT_NPROC otherwise), so a fork bomb stops at this many.
    meet_seconds: wall-clock bound on any one meet at this place, whatever the caller asks.
    """

    cpu_seconds: int = 30
    memory_bytes: int = 1024 * 1024 * 1024
    file_bytes: int = 64 * 1024 * 1024
    open_files: int = 256
    processes: int = 64
    meet_seconds: float = 300.0
    disk_bytes: int = 256 * 1024 * 1024
    cpus: float = 1.0

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"limit {f.name} must be a positive number, got {value!r}")
        if self.memory_bytes < 64 * 1024 * 1024:
            raise ValueError("limit memory_bytes must be at least 64 MiB: an interpreter "
                             "needs that much to start")
        if self.open_files < 16:
            raise ValueError("limit open_files must be at least 16")
        if self.disk_bytes < 1024 * 1024:
            raise ValueError("limit disk_bytes must be at least 1 MiB")
        if self.cpus < 0.01:
            raise ValueError("limit cpus must be at least 0.01 (a hundredth of a core)")


#: Seconds between a rear guard's questions to the place its agent went to.
HEARTBEAT = 1.0
#: Seconds a rear guard goes on asking a place that refuses its connections (the place's
#: process is gone, its host is up) before it takes the agent as lost.
LOST_AFTER = 6.0
#: Seconds a rear guard waits for a place that stays silent (questions time out: a cut link,
#: a dead host, or a path losing most packets, where TCP's retransmissions back off to
#: several seconds) before it takes the agent as lost.
SILENT_AFTER = 30.0
#: Seconds a place waits for the next place's answer to a hand-over on one connection
#: before it sends the hand-over again on a new one (a connection gone half open).
HAND_OVER_WAIT = 30.0

#: TripTimings' fields, as a place's options name them (its errors say these).
_TIMING_OPTIONS = {"every": "--rear-guard-every", "refused_for": "--lost-after",
                   "silent_for": "--silent-after", "hand_over_wait": "--hand-over-wait"}


@dataclass(frozen=True, slots=True)
class TripTimings:
    """How soon a place takes the next place of a trip as lost (the place's settings
    --rear-guard-every, --lost-after, --silent-after and --hand-over-wait; the defaults
    are the constants above)."""

    every: float = HEARTBEAT  # between a rear guard's questions
    refused_for: float = LOST_AFTER  # its connections refused this long: lost
    silent_for: float = SILENT_AFTER  # its questions unanswered this long: lost
    hand_over_wait: float = HAND_OVER_WAIT  # an unanswered hand-over goes again after

    def __post_init__(self) -> None:
        for name, option in _TIMING_OPTIONS.items():
            value = getattr(self, name)
            if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{option} must be above 0 seconds, got {value!r}")
        if self.refused_for < self.every or self.silent_for < self.every:
            # A place is taken as lost after one question at least.
            raise ValueError(f"--lost-after ({self.refused_for:g} s) and --silent-after "
                             f"({self.silent_for:g} s) must be at least --rear-guard-every "
                             f"({self.every:g} s)")


@dataclass(frozen=True, slots=True)
class PlaceSettings:
    """How a place runs.

    listen: HOST:PORT to accept meets on (port 0 picks a free one).
    state_dir: what the place keeps: installed agents (agents/), agents' working
        directories while they run (work/), compiled programs (cache/), files agents may
        read (data/), its cabinets and its admin token.
    pool_size: pre-started workers kept ready per interpreter, so a meet hands its briefcase
        to a process that already exists (TACOMA's fix for fork and exec on the critical path):
        the least the pool keeps; it grows under load, up to pool_max, and shrinks back when
        the load is gone.
    pool_max: the most workers a pool keeps ready or starting, per interpreter (None: 16, or
        pool_size if that is more; 0 if pool_size is 0, which keeps no pool at all).
    max_frame: largest frame, and so briefcase, accepted or sent, in bytes.
    max_meets: meets running at once; more are refused with PlaceUnavailable.
    max_connections: client connections open at once; more are refused (ConnectError).
    grace_seconds: on shutdown, how long running meets may take to finish before being killed.
    separate_uids: as root, run every agent under a uid and gid of its own (the default).
        Off, agents run as root: they can then signal the place and read what root may.
    mailbox_messages, mailbox_bytes: the most messages, and bytes of them, waiting for any
        one resident agent; more are refused with MailboxFull.
    mailbox_total_bytes: the most bytes of messages waiting at the place, for all its
        residents together.
    identity: the place's identity (a name in the trust directory, or an identity file);
        None: on loopback, its user's local place identity (made, with the CA, on first
        start); elsewhere a place must be given one.
    insecure: no TLS and no authentication, for a closed test network only (warned of at
        every start).
    trust_dir: the trust directory (default $TACOMA_TRUST_DIR, or the user's config dir).
    deny_list: the revoked certificates (default: the trust directory's `revoked`), reread
        when it changes.
    allow: `PRINCIPAL:AGENT_PATTERN` rules (shell patterns); if any is given, a meet is
        served only if one matches its principal and agent.
    share: the fraction of max_connections and of max_meets any one principal may hold.
    agent_network: "none" (the default): agents have no network, only their channel to the
        place (meet, send, go); "host": agents have the host's network.
    max_receiving: the bytes of briefcases being received at once from all peers together
        (frames are buffered whole); a peer whose frame would pass it is refused (a Bye),
        and one that stops in the middle of a frame is dropped after 30 s.
    idle_seconds: a connection with no meet in flight that has sent nothing for this long
        is closed (with a Bye saying so); clients reconnect when they next meet. Clients
        stop reusing a connection idle for 45 s, so below 60 s a meet may cross the close
        (the CLI refuses such values; the Python API allows them, for tests).
    max_queued: async meets that may wait in the journal for a slot while the place runs
        max_meets (each principal its share of them); more are refused (PlaceUnavailable).
    keep_results: seconds the journal keeps a meet's outcome after it ended (for `tacoma
        status`).
    handshake_seconds: a new connection that has not finished its TLS handshake this long
        after it was accepted is dropped (and logged).
    hello_seconds: a connection that has not said Hello this long after its handshake is
        closed.
    trip_timings: how soon this place takes the next place of a trip it handed an agent
        to as lost with it (see TripTimings: its rear guard asks where the agent is every
        `every` seconds; a place that refuses its connections for `refused_for`, or leaves
        its questions unanswered for `silent_for`, is lost), and how long a hand-over waits
        for its answer on one connection before it goes again on a new one.
    journal_bytes: the most bytes of async meets' briefcases and meets' results the
        journal keeps at once, of which any one principal may keep its `share` (more are
        refused with LimitExceeded); None: a quarter of the state directory's file system,
        at most 1 GiB.
    lazy_bytes: the most bytes of lazy folders' data the place keeps for its agents (and
        relays for its clients' connections) at once; a folder that would pass it is sent
        as data instead of made lazy (LimitExceeded to the agent).
    lazy_seconds: how long the place keeps a lazy folder's data after its agent made it
        lazy (or a client sent it), so that meets that carry it, here or at other places,
        can read it; after that a read fails (LazyFolderError).
    prefetch: chunks an agent here fetches after each run of chunks of a lazy folder it
        lacks (Accent's prefetch: one always paid there).
    cabinet_bytes: the most bytes of cabinets the place keeps (each element charged to the
        principal whose meet wrote it), of which any one principal may write its share; a
        write that would pass either is refused whole (LimitExceeded). None: a quarter of
        the state directory's file system, at most 1 GiB.
    reuse: "same-program" (the default): a worker whose meet ended well is kept warm and
        serves later meets of the same principal and the same program, and only those
        (place.workers._warm); "never": a fresh process for every meet. Reuse needs what
        makes a worker clean between meets (as root: a PID namespace, a tmpfs and cgroups
        of its own), and principals (not `insecure`); without them every meet gets a fresh
        process.
    warm_max: the most idle warm workers the place keeps, of all languages; any one
        principal may keep half of them.
    warm_meets: a warm worker that has served this many meets is destroyed after its last.
    warm_seconds: a warm worker that has lived this long is destroyed after its meet.
    instances_in_place: run the meets of languages whose every meet is a fresh instance of
        their runtime (WebAssembly) on threads of the place's own process, not in confined
        worker processes: no process per principal and no sandbox layer around the
        runtime, whose memory safety and limits are then the only wall between an agent
        and the place (its identity, every principal's meets and cabinets). For operators
        who accept that trade; off by default.
    instances_memory: with instances_in_place, the most memory the instances running in the
        place's process may hold together, each charged its agent's memory limit: that
        many meets run at once (any one principal its share of them), and more are refused
        until some end. None: half of the host's memory.
    """

    listen: str = DEFAULT_LISTEN
    state_dir: Path = field(default_factory=default_state_dir)
    pool_size: int = 2
    pool_max: int | None = None
    max_frame: int = DEFAULT_MAX_FRAME
    lazy_bytes: int = 256 * 1024 * 1024
    lazy_seconds: float = 600.0
    prefetch: int = 1
    cabinet_bytes: int | None = None
    max_meets: int = 256
    max_connections: int = 1024
    grace_seconds: float = 10.0
    limits: Limits = field(default_factory=Limits)
    separate_uids: bool = True
    mailbox_messages: int = 1000
    mailbox_bytes: int = 16 * 1024 * 1024
    mailbox_total_bytes: int = 256 * 1024 * 1024
    identity: str | None = None
    insecure: bool = False
    trust_dir: Path | None = None
    deny_list: Path | None = None
    allow: tuple[str, ...] = ()
    share: float = 0.25
    agent_network: str = "none"
    idle_seconds: float = IDLE_SECONDS
    max_receiving: int = 256 * 1024 * 1024
    max_queued: int = 1024
    keep_results: float = 24 * 3600.0
    journal_bytes: int | None = None
    trip_timings: TripTimings = field(default_factory=TripTimings)
    handshake_seconds: float = HANDSHAKE_TIMEOUT
    hello_seconds: float = HELLO_TIMEOUT
    reuse: str = "same-program"
    warm_max: int = 64
    warm_meets: int = 1000
    warm_seconds: float = 60.0
    instances_in_place: bool = False
    instances_memory: int | None = None

    def __post_init__(self) -> None:
        # Absolute: agents' working directories are below it, and they start elsewhere.
        object.__setattr__(self, "state_dir", Path(self.state_dir).expanduser().absolute())
        object.__setattr__(self, "allow", tuple(self.allow))
        for rule in self.allow:
            who, _, what = rule.partition(":") if isinstance(rule, str) else ("", "", "")
            if not who or not what:
                raise ValueError(f"an allow rule is PRINCIPAL:AGENT_PATTERN (shell patterns, "
                                 f"e.g. alice:ag_python or '*:ag_echo'), got {rule!r}")
        if not isinstance(self.share, int | float) or not 0 < self.share <= 1:
            raise ValueError(f"share must be a fraction above 0 and at most 1, got "
                             f"{self.share!r}")
        if not isinstance(self.max_receiving, int) or self.max_receiving < self.max_frame:
            raise ValueError(f"max_receiving must be at least max_frame ({self.max_frame}), "
                             f"got {self.max_receiving!r}")
        for name in ("handshake_seconds", "hello_seconds"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be above 0, got {value!r}")
        if not isinstance(self.idle_seconds, int | float) or not self.idle_seconds > 0:
            raise ValueError(f"idle_seconds must be above 0, got {self.idle_seconds!r}")
        if self.instances_memory is not None and (
                not isinstance(self.instances_memory, int) or self.instances_memory < 0):
            raise ValueError(f"instances_memory must be at least 0 bytes, got "
                             f"{self.instances_memory!r}")
        if self.instances_memory is not None and not self.instances_in_place:
            raise ValueError("--instances-memory bounds the instances run in the place's own "
                             "process: give it with --instances-in-place")
        if self.reuse not in REUSE:
            raise ValueError(f"reuse must be one of {', '.join(REUSE)}, got {self.reuse!r}")
        for name in ("warm_max", "warm_meets"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be at least 0, got {value!r}")
        if not isinstance(self.warm_seconds, int | float) or not self.warm_seconds > 0:
            raise ValueError(f"warm_seconds must be above 0, got {self.warm_seconds!r}")
        if self.agent_network not in AGENT_NETWORKS:
            raise ValueError(f"agent_network must be one of {', '.join(AGENT_NETWORKS)}, got "
                             f"{self.agent_network!r}")
        if self.insecure and self.identity is not None:
            raise ValueError("an --insecure place uses no identity: give one or the other")
        if not isinstance(self.pool_size, int) or not 0 <= self.pool_size <= 64:
            raise ValueError(f"pool_size must be 0 to 64, got {self.pool_size!r}")
        if self.pool_max is None and isinstance(self.pool_size, int):
            # No pool (--pool-size 0) stays none: every meet starts its own worker.
            object.__setattr__(self, "pool_max",
                               max(self.pool_size, POOL_MAX) if self.pool_size else 0)
        if (not isinstance(self.pool_max, int) or not self.pool_size <= self.pool_max <= 256):
            raise ValueError(f"pool_max must be from pool_size ({self.pool_size}) to 256, "
                             f"got {self.pool_max!r}")
        if not isinstance(self.max_frame, int) or self.max_frame < 64 * 1024:
            raise ValueError(f"max_frame must be at least 65536 bytes, got {self.max_frame!r}")
        if not isinstance(self.max_queued, int) or self.max_queued < 0:
            raise ValueError(f"max_queued must be at least 0, got {self.max_queued!r}")
        if self.journal_bytes is not None and (not isinstance(self.journal_bytes, int)
                                               or self.journal_bytes < 1024 * 1024):
            raise ValueError(f"journal_bytes must be at least 1 MiB, got "
                             f"{self.journal_bytes!r}")
        if not isinstance(self.keep_results, int | float) or not self.keep_results > 0:
            raise ValueError(f"keep_results must be above 0 seconds, got "
                             f"{self.keep_results!r}")
        if not isinstance(self.max_meets, int) or self.max_meets < 1:
            raise ValueError(f"max_meets must be at least 1, got {self.max_meets!r}")
        if not isinstance(self.max_connections, int) or self.max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, got "
                             f"{self.max_connections!r}")
        for name in ("mailbox_messages", "mailbox_bytes", "mailbox_total_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be at least 1, got {value!r}")
        if self.grace_seconds < 0:
            raise ValueError("grace_seconds must be >= 0")
        if self.cabinet_bytes is not None and (not isinstance(self.cabinet_bytes, int)
                                               or isinstance(self.cabinet_bytes, bool)
                                               or self.cabinet_bytes < 0):
            raise ValueError(f"cabinet_bytes must be at least 0, got {self.cabinet_bytes!r}")

    @property
    def agents_dir(self) -> Path:
        return self.state_dir / "agents"

    @property
    def trusted_dir(self) -> Path:
        """Agents that run in the place's own process (see _trusted)."""
        return self.state_dir / "trusted"

    @property
    def work_dir(self) -> Path:
        return self.state_dir / "work"

    @property
    def data_dir(self) -> Path:
        """Files the place offers its agents to read (they find it in $TACOMA_DATA)."""
        return self.state_dir / "data"

    @property
    def admin_token_file(self) -> Path:
        """The place's admin token (for tacoma ps and kill), readable only by its owner."""
        return self.state_dir / "admin.token"

    @property
    def cache_dir(self) -> Path:
        return self.state_dir / "cache"
