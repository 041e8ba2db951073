"""The sandbox plan: what the place decided about confining one agent process.

The place (`place.workers._containment`) builds a `SandboxPlan` for every worker and every
build it starts, and the process applies it on entry, layer by layer (`_sandbox.enter`);
a language's zygote gets a `ZygotePlan`, the namespaces and mount view it enters once for
all the workers it forks. Both are frozen values, typed field by field, so that what the
place decided cannot be changed on the way, and a layer is read by its name, not looked
up by a string that may be misspelt.

A plan crosses process boundaries as plain data: msgpack in a spawn request to the zygote,
JSON on the command line of a zygote or a build. `to_wire` gives that form (maps, lists,
strings, numbers: the seccomp filter in hex, as JSON has no bytes) and `from_wire` reads it
back, refusing a map with a key it does not know or without one it needs, and a value of
the wrong type: a place and a worker image that disagree fail at once, saying so, rather
than confining an agent by half a plan.

Standard library only: this runs inside agent processes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

# typing costs a worker ~9 ms to import; annotations are strings (PEP 563) anyway.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TypeVar

    _T = TypeVar("_T")

__all__ = ["Artifacts", "Cover", "Landlock", "Mounts", "Namespaces", "Rlimits", "Rule",
           "SandboxPlan", "View", "ZygotePlan"]

#: A directory covered by an empty tmpfs, and the paths below it that it still shows.
Cover = tuple[str, tuple[str, ...]]
#: A path, and the Landlock accesses allowed beneath it (`_landlock`'s bits).
Rule = tuple[str, int]

_NONE = type(None)
_HOW_TO_FIX = ("the place and the agent's worker image must come from the same tacoma: "
               "restart the place after upgrading it")


def _checked(wire: object, cls: type, what: str) -> dict[str, Any]:
    """`wire` as the map of `cls`: every key it needs, none it does not know."""
    if not isinstance(wire, dict):
        raise ValueError(f"{what}: expected a map, got {type(wire).__name__}")
    fields = dataclasses.fields(cls)
    known = {f.name for f in fields}
    needed = [f.name for f in fields if f.default is dataclasses.MISSING]
    unknown = sorted(repr(k) for k in wire if k not in known)
    missing = sorted(repr(k) for k in needed if k not in wire)
    problems = [f"{kind} key{'s' if len(keys) > 1 else ''} {', '.join(keys)}"
                for kind, keys in (("unknown", unknown), ("missing", missing)) if keys]
    if problems:
        raise ValueError(f"{what}: {'; '.join(problems)} ({_HOW_TO_FIX})")
    return wire


def _typed(value: object, kinds: tuple[type, ...], what: str) -> Any:
    """`value` if its type is one of `kinds` (exactly: a bool is not taken for an int)."""
    if type(value) not in kinds:
        names = " or ".join("None" if k is _NONE else k.__name__ for k in kinds)
        raise ValueError(f"{what}: expected {names}, got {value!r:.80} ({_HOW_TO_FIX})")
    return value


class _Flat:
    """A plan's part whose fields are all of one kind (`KIND`): its wire form is its fields
    by name."""

    __slots__ = ()
    KIND: type = object
    WHAT = ""

    def to_wire(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name)
                for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_wire(cls: type[_T], wire: object, what: str = "") -> _T:
        what = what or cls.WHAT  # type: ignore[attr-defined]
        w = _checked(wire, cls, what)
        return cls(**{k: _typed(w[k], (cls.KIND,), f"{what}: {k}")  # type: ignore[attr-defined]
                      for k in w})


def _wire(part: View | None) -> dict[str, object] | None:
    return part.to_wire() if part is not None else None


def _view(w: dict[str, Any], what: str) -> View | None:
    view = w.get("view")
    return View.from_wire(view, f"{what}: view") if view is not None else None


def _strings(value: object, what: str) -> tuple[str, ...]:
    return tuple(_typed(s, (str,), what) for s in _typed(value, (list, tuple), what))


def _pair(value: object, what: str) -> tuple[Any, Any]:
    pair = _typed(value, (list, tuple), what)
    if len(pair) != 2:
        raise ValueError(f"{what}: expected a pair, got {value!r:.80} ({_HOW_TO_FIX})")
    return pair[0], pair[1]


@dataclass(frozen=True, slots=True, kw_only=True)
class Rlimits(_Flat):
    """The resource limits of each process (rlimits; cgroups bound all of them together)."""

    cpu_seconds: int  # CPU time, counted from entry: start-up is not the agent's
    memory_bytes: int  # address space
    file_bytes: int  # the largest file it may write
    open_files: int  # file descriptors

    KIND = int
    WHAT = "sandbox plan: limits"


@dataclass(frozen=True, slots=True, kw_only=True)
class View:
    """What every agent's mount namespace covers (`_mounts.prepare_view`)."""

    covers: tuple[Cover, ...]  # outermost first: a cover may show paths others cover
    hide_files: tuple[str, ...]  # files covered by /dev/null (an identity file, say)

    def to_wire(self) -> dict[str, object]:
        return {"covers": [[d, list(shown)] for d, shown in self.covers],
                "hide_files": list(self.hide_files)}

    @classmethod
    def from_wire(cls, wire: object, what: str) -> View:
        w = _checked(wire, cls, what)
        covers = []
        for cover in _typed(w["covers"], (list, tuple), f"{what}: covers"):
            directory, shown = _pair(cover, f"{what}: a cover")
            covers.append((_typed(directory, (str,), f"{what}: a cover"),
                           _strings(shown, f"{what}: a cover's paths")))
        return cls(covers=tuple(covers),
                   hide_files=_strings(w["hide_files"], f"{what}: hide_files"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Mounts:
    """The process's own part of its mount namespace (`_mounts.enter_scratch`): one tmpfs
    for all it writes, and for a build also the view no zygote prepared for it."""

    at: str  # where the tmpfs is mounted: a worker's the whole work directory, so that its
    #          own working directory is the only one it sees; a build's an empty stage
    quota: int  # the tmpfs's size, in bytes: the agent's disk quota
    uid: int | None  # the owner of what is made in it (None: the process's own)
    keep: tuple[str, ...]  # paths that must show through the scratch directories
    proc: bool  # mount a /proc of its own: it is the first process of a PID namespace
    name: str | None = None  # a worker's working directory, made in the tmpfs
    view: View | None = None  # a build's covers (a worker's zygote prepared them)

    def to_wire(self) -> dict[str, object]:
        return {"at": self.at, "quota": self.quota, "uid": self.uid, "keep": list(self.keep),
                "proc": self.proc, "name": self.name,
                "view": _wire(self.view)}

    @classmethod
    def from_wire(cls, wire: object, what: str = "sandbox plan: mounts") -> Mounts:
        w = _checked(wire, cls, what)
        return cls(at=_typed(w["at"], (str,), f"{what}: at"),
                   quota=_typed(w["quota"], (int,), f"{what}: quota"),
                   uid=_typed(w["uid"], (int, _NONE), f"{what}: uid"),
                   keep=_strings(w["keep"], f"{what}: keep"),
                   proc=_typed(w["proc"], (bool,), f"{what}: proc"),
                   name=_typed(w.get("name"), (str, _NONE), f"{what}: name"),
                   view=_view(w, what))


@dataclass(frozen=True, slots=True, kw_only=True)
class Landlock:
    """What the process restricts itself to with Landlock (`_landlock.restrict`)."""

    rules: tuple[Rule, ...]  # every file access no rule allows is refused
    deny_tcp: bool  # no TCP bind or connect (agents do not get the host's network)

    def to_wire(self) -> dict[str, object]:
        return {"rules": [[path, access] for path, access in self.rules],
                "deny_tcp": self.deny_tcp}

    @classmethod
    def from_wire(cls, wire: object, what: str = "sandbox plan: landlock") -> Landlock:
        w = _checked(wire, cls, what)
        rules = []
        for rule in _typed(w["rules"], (list, tuple), f"{what}: rules"):
            path, access = _pair(rule, f"{what}: a rule")
            rules.append((_typed(path, (str,), f"{what}: a rule's path"),
                          _typed(access, (int,), f"{what}: a rule's access")))
        return cls(rules=tuple(rules), deny_tcp=_typed(w["deny_tcp"], (bool,),
                                                       f"{what}: deny_tcp"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Artifacts(_Flat):
    """Where a worker of a compiled language finds the programs the place compiled."""

    directory: str  # the language's cache: the worker may run what it names, not list it
    build_id: str  # the compiler's half of each program's key (`wire._program.artifact_key`)

    KIND = str
    WHAT = "sandbox plan: artifacts"


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxPlan:
    """How one agent process (a worker, or a build: a compiler the place runs on an
    agent's behalf) is confined, and what it needs to know besides; `_sandbox.enter`
    applies the layers in its own order. A layer the place found it cannot apply here is
    not in the plan (None, or False); one that is must be applied, or the process ends."""

    # The process.
    workdir: str  # its working directory, HOME and TMPDIR
    env: dict[str, str]  # its whole environment
    # The layers, in the order they are applied.
    cgroups: tuple[str, ...]  # the cgroup directories it joins (as root; () without)
    limits: Rlimits
    nproc: int | None  # RLIMIT_NPROC (None where root or the cgroups bound processes)
    mounts: Mounts | None = None  # its tmpfs, where the mount layer applies
    userns: bool  # a user namespace of its own (not root): its own RLIMIT_NPROC count
    ipcns: bool = False  # a System V IPC namespace of its own: its segments die with it
    landlock: Landlock | None = None  # where the kernel offers Landlock
    uid: int | None  # the agent's own uid and gid (as root; None: stays as it is)
    seccomp: bytes | None  # the filter program (struct sock_filter[]), built by the place
    # Its place.
    place: str  # the place's address: the agent API's `place`
    max_frame: int  # the largest frame on the channel to the place
    prefetch: int  # chunks of a lazy folder fetched ahead of the one read
    # A worker's.
    ahead: bool = False  # started before its meet: it warms itself up (`serve_one`)
    reuse: bool = False  # it may serve later meets (of one principal and program): it
    #                      cleans itself after each and says Ready (`_reuse`)
    artifacts: Artifacts | None = None  # a compiled language's programs
    # A build's (`_sandbox.exec_plan`).
    argv: tuple[str, ...] = ()  # the program it runs, confined
    namespaces: bool = False  # make new PID and network namespaces for it (as root)
    # Whose death it dies with: a build's place, a worker's zygote (which sets these).
    parent: int = 0  # its pid (0: the parent outside this process's PID namespace)
    parent_pidfd: int | None = None  # a pidfd of it, where its pid is not visible
    fd: int = -1  # a worker's channel to its place (the zygote passes it on)

    def to_wire(self) -> dict[str, object]:
        """The plan as plain data, for msgpack or JSON (`from_wire` reads it back)."""
        return {
            "workdir": self.workdir, "env": dict(self.env), "cgroups": list(self.cgroups),
            "limits": self.limits.to_wire(), "nproc": self.nproc,
            "mounts": self.mounts.to_wire() if self.mounts is not None else None,
            "userns": self.userns, "ipcns": self.ipcns,
            "landlock": self.landlock.to_wire() if self.landlock is not None else None,
            "uid": self.uid,
            "seccomp": self.seccomp.hex() if self.seccomp is not None else None,
            "place": self.place, "max_frame": self.max_frame, "prefetch": self.prefetch,
            "ahead": self.ahead, "reuse": self.reuse,
            "artifacts": self.artifacts.to_wire() if self.artifacts is not None else None,
            "argv": list(self.argv), "namespaces": self.namespaces, "parent": self.parent,
            "parent_pidfd": self.parent_pidfd, "fd": self.fd,
        }

    @classmethod
    def from_wire(cls, wire: object) -> SandboxPlan:
        """The plan `to_wire` gave; ValueError, saying what is wrong, for anything else."""
        what = "sandbox plan"
        w = _checked(wire, cls, what)
        env = _typed(w["env"], (dict,), f"{what}: env")
        for name, value in env.items():
            _typed(name, (str,), f"{what}: env")
            _typed(value, (str,), f"{what}: env {name}")
        mounts, landlock, seccomp, artifacts = (w.get(k) for k in (
            "mounts", "landlock", "seccomp", "artifacts"))
        try:
            program = bytes.fromhex(_typed(seccomp, (str,), f"{what}: seccomp")) \
                if seccomp is not None else None
        except ValueError as exc:
            raise ValueError(f"{what}: seccomp: {exc} ({_HOW_TO_FIX})") from None
        return cls(
            workdir=_typed(w["workdir"], (str,), f"{what}: workdir"),
            env=dict(env),
            cgroups=_strings(w["cgroups"], f"{what}: cgroups"),
            limits=Rlimits.from_wire(w["limits"]),
            nproc=_typed(w["nproc"], (int, _NONE), f"{what}: nproc"),
            mounts=Mounts.from_wire(mounts) if mounts is not None else None,
            userns=_typed(w["userns"], (bool,), f"{what}: userns"),
            ipcns=_typed(w.get("ipcns", False), (bool,), f"{what}: ipcns"),
            landlock=Landlock.from_wire(landlock) if landlock is not None else None,
            uid=_typed(w["uid"], (int, _NONE), f"{what}: uid"),
            seccomp=program,
            place=_typed(w["place"], (str,), f"{what}: place"),
            max_frame=_typed(w["max_frame"], (int,), f"{what}: max_frame"),
            prefetch=_typed(w["prefetch"], (int,), f"{what}: prefetch"),
            ahead=_typed(w.get("ahead", False), (bool,), f"{what}: ahead"),
            reuse=_typed(w.get("reuse", False), (bool,), f"{what}: reuse"),
            artifacts=Artifacts.from_wire(artifacts) if artifacts is not None else None,
            argv=_strings(w.get("argv", ()), f"{what}: argv"),
            namespaces=_typed(w.get("namespaces", False), (bool,), f"{what}: namespaces"),
            parent=_typed(w.get("parent", 0), (int,), f"{what}: parent"),
            parent_pidfd=_typed(w.get("parent_pidfd"), (int, _NONE), f"{what}: parent_pidfd"),
            fd=_typed(w.get("fd", -1), (int,), f"{what}: fd"),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Namespaces:
    """What a language's zygote enters once, for every worker it forks (`_zygote`)."""

    netns: bool  # a network namespace of its own, empty (unless made with `userns`)
    pidns: bool  # each worker the first process of a new PID namespace
    userns: bool  # a user namespace (not root), in which the others are made
    view: View | None = None  # the mount view every worker shares, where mounts apply

    def to_wire(self) -> dict[str, object]:
        return {"netns": self.netns, "pidns": self.pidns, "userns": self.userns,
                "view": _wire(self.view)}

    @classmethod
    def from_wire(cls, wire: object, what: str = "zygote plan: namespaces") -> Namespaces:
        w = _checked(wire, cls, what)
        return cls(netns=_typed(w["netns"], (bool,), f"{what}: netns"),
                   pidns=_typed(w["pidns"], (bool,), f"{what}: pidns"),
                   userns=_typed(w["userns"], (bool,), f"{what}: userns"),
                   view=_view(w, what))


@dataclass(frozen=True, slots=True, kw_only=True)
class ZygotePlan:
    """How a language's zygote starts: not an agent process, so no `SandboxPlan`, but the
    namespaces all its workers share, and how it hears from its place."""

    parent: int  # the place's pid: the zygote dies with it
    control_fd: int  # the socket spawn requests come on (`_zygote`'s control protocol)
    namespaces: Namespaces

    def to_wire(self) -> dict[str, object]:
        return {"parent": self.parent, "control_fd": self.control_fd,
                "namespaces": self.namespaces.to_wire()}

    @classmethod
    def from_wire(cls, wire: object) -> ZygotePlan:
        what = "zygote plan"
        w = _checked(wire, cls, what)
        return cls(parent=_typed(w["parent"], (int,), f"{what}: parent"),
                   control_fd=_typed(w["control_fd"], (int,), f"{what}: control_fd"),
                   namespaces=Namespaces.from_wire(w["namespaces"]))
