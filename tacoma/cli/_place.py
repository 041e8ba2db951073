"""`tacoma place`, `tacoma doctor` and `tacoma install`: running a place here, and setting it up.

`place` builds the same `tacoma.PlaceSettings` and `tacoma.Limits` the Python API takes
(their defaults are the options' defaults) and runs a `tacoma.Place` until a signal;
`doctor` asks each installed interpreter whether it can run here; `install` puts a program
into the place's agents/ folder, where a running place finds it at its next meet.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

import tacoma

from ..place._settings import DEFAULT_LISTEN, REUSE, TripTimings, default_state_dir
from ..wire._address import parse_address
from ..wire._names import RESERVED_AGENTS
from ..wire._protocol import MIN_IDLE_SECONDS
from ..wire._text import SafeFormatter
from ._common import (
    ByteSize,
    CommandFunction,
    Duration,
    fail,
    format_duration,
    format_size,
    state_dir_option,
)

if TYPE_CHECKING:
    from ..agent._interpreter import Interpreter

__all__ = ["doctor", "install", "place"]


class CannotListen(click.ClickException):
    """A place that cannot listen where it was told (exit status 1), with what to do."""

    kind = "CannotListen"

    def __init__(self, listen: str, exc: OSError) -> None:
        super().__init__(f"cannot listen on {listen}: {exc.strerror or exc}")
        host, _, port = listen.rpartition(":")
        if exc.errno == errno.EADDRINUSE:
            self.hint = (f"another program listens on port {port} (a place already running? "
                         f"tacoma status {listen}); give this one another: --listen "
                         f"{host}:PORT")
        elif exc.errno == errno.EADDRNOTAVAIL:
            self.hint = f"this host has no address {host}: --listen HOST:PORT with one it has"
        elif exc.errno == errno.EACCES:
            self.hint = f"port {port} needs privileges: take one above 1023"
        else:
            self.hint = ""


def _timing(*decls: str, default: float,
            help: str) -> Callable[[CommandFunction], CommandFunction]:
    """One of the place's timeouts, as an option: a duration of 0.1 s at least."""
    return click.option(*decls, type=Duration(0.1), default=format_duration(default),
                        show_default=True, help=help)


def _limits_options(f: CommandFunction) -> CommandFunction:
    """One option per field of `tacoma.Limits`, defaulting to its default."""
    defaults = tacoma.Limits()
    options = [
        click.option("--cpu-seconds", type=Duration(1, whole=True),
                     default=format_duration(defaults.cpu_seconds), show_default=True,
                     help="CPU time of each agent (30, 90s, 5m): of each of its processes, "
                          "and (as root) of all of them together."),
        click.option("--memory", "memory_bytes", type=ByteSize(64 * 2**20),
                     default=format_size(defaults.memory_bytes), show_default=True,
                     help="Memory of each agent (2G, 512M; K, M, G, T are powers of 1024): "
                          "the address space of each of its processes, and (as root) the "
                          "memory of all of them together."),
        click.option("--disk", "disk_bytes", type=ByteSize(2**20),
                     default=format_size(defaults.disk_bytes), show_default=True,
                     help="What each agent may write: its working directory, /tmp, /var/tmp "
                          "and /dev/shm together."),
        click.option("--cpus", type=click.FloatRange(min=0.01),
                     default=defaults.cpus, show_default=True,
                     help="CPU rate of each agent, in cores (as root: a CPU cgroup)."),
        click.option("--file-size", "file_bytes", type=ByteSize(1),
                     default=format_size(defaults.file_bytes), show_default=True,
                     help="Largest file an agent may write."),
        click.option("--open-files", type=click.IntRange(min=16),
                     default=defaults.open_files, show_default=True,
                     help="Open file descriptors per agent."),
        click.option("--processes", type=click.IntRange(min=1),
                     default=defaults.processes, show_default=True,
                     help="Processes and threads per agent."),
        click.option("--meet-seconds", type=Duration(positive=True),
                     default=format_duration(defaults.meet_seconds), show_default=True,
                     help="Wall-clock bound on any meet at this place (30s, 5m, 2h)."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


_SETTINGS = tacoma.PlaceSettings()
_TRIPS = _SETTINGS.trip_timings
#: Where the place command keeps its own arguments as given (ctx.meta), for the unit.
_ARGUMENTS = "tacoma.place.arguments"


class _PlaceCommand(click.Command):
    """`tacoma place`, keeping the arguments it was given: --print-systemd-unit carries
    them, as typed, into the unit's ExecStart=."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta[_ARGUMENTS] = tuple(args)
        return super().parse_args(ctx, args)


@click.command(cls=_PlaceCommand)
@click.option("--listen", default=DEFAULT_LISTEN, show_default=True, metavar="HOST:PORT",
              help="Address to accept meets on (port 0 picks a free port).")
@state_dir_option("What the place keeps.")
@click.option("--pool-size", type=click.IntRange(0, 64), default=2, show_default=True,
              help="Pre-started workers kept ready per language, at least; the pool "
                   "grows under load and shrinks back when idle.")
@click.option("--pool-max", type=click.IntRange(0, 256), default=None,
              help="The most workers a pool grows to under load. [default: 16, or "
                   "--pool-size if larger]")
@click.option("--reuse", type=click.Choice(REUSE), default=_SETTINGS.reuse, show_default=True,
              help="Keep a worker warm after a meet that ended well, for later meets of "
                   "the same principal and the same program only (never anyone else's); "
                   "'never': a fresh process for every meet. A meet with a FRESH folder "
                   "always gets a fresh one.")
@click.option("--instances-in-place", is_flag=True,
              help="Run the instances of languages whose every meet is a fresh instance "
                   "of their runtime (WebAssembly) on threads of the place's own process, "
                   "not in confined worker processes: faster, but the runtime is then the "
                   "only wall between an agent and the place. See tacoma doctor.")
@click.option("--instances-memory", type=ByteSize(0), default=None,
              help="With --instances-in-place: the most memory the instances running in "
                   "the place's process may hold together, each charged its --memory; "
                   "meets past it are refused until some end. [default: half the host's "
                   "memory]")
@click.option("--warm-max", type=click.IntRange(0, 4096), default=_SETTINGS.warm_max,
              show_default=True, help="The most idle warm workers kept, of all languages; "
              "any one principal may keep half of them. Idle ones go after 5 s.")
@click.option("--warm-meets", type=click.IntRange(min=1), default=_SETTINGS.warm_meets,
              show_default=True, help="A warm worker is destroyed after this many meets.")
@click.option("--warm-seconds", type=Duration(), default=f"{_SETTINGS.warm_seconds:g}s",
              show_default=True, help="A warm worker is destroyed after its meet once it "
              "has lived this long.")
@click.option("--max-briefcase", "max_frame", type=ByteSize(65536),
              default=format_size(_SETTINGS.max_frame), show_default=True,
              help="Largest briefcase (frame) accepted or sent (256M, 1G).")
@click.option("--max-meets", type=click.IntRange(min=1), default=256, show_default=True,
              help="Meets running at once; more are refused.")
@click.option("--max-connections", type=click.IntRange(min=1), default=1024,
              show_default=True, help="Client connections open at once; more are refused.")
@click.option("--grace", "grace_seconds", type=Duration(), default="10s",
              show_default=True, help="On SIGINT/SIGTERM, how long running meets may take "
              "to finish.")
@click.option("--mailbox-messages", type=click.IntRange(min=1),
              default=_SETTINGS.mailbox_messages, show_default=True,
              help="Messages waiting for any one resident agent; more are refused.")
@click.option("--mailbox-bytes", type=ByteSize(1),
              default=format_size(_SETTINGS.mailbox_bytes), show_default=True,
              help="Bytes of messages waiting for any one resident agent.")
@click.option("--mailbox-total-bytes", type=ByteSize(1),
              default=format_size(_SETTINGS.mailbox_total_bytes), show_default=True,
              help="Bytes of messages waiting at the place, for all residents together.")
@_limits_options
@click.option("--same-uid", is_flag=True,
              help="As root, run agents as root too (unsafe: they can then signal the place "
                   "and read whatever root may). By default each agent gets a uid of its own.")
@click.option("--max-receiving", type=ByteSize(65536),
              default=format_size(_SETTINGS.max_receiving), show_default=True,
              help="Bytes of briefcases being received at once from all peers together; "
                   "a peer whose briefcase would pass it is refused.")
@click.option("--idle-seconds", type=Duration(MIN_IDLE_SECONDS),
              default=format_duration(_SETTINGS.idle_seconds), show_default=True,
              help="Close a connection with no meet in flight after it has been silent this "
                   "long (clients reconnect at their next meet).")
@click.option("--max-queued", type=click.IntRange(min=0), default=_SETTINGS.max_queued,
              show_default=True,
              help="Async meets that may wait in the journal while the place runs "
                   "--max-meets; more are refused (PlaceUnavailable).")
@click.option("--keep-results", type=Duration(1),
              default=format_duration(_SETTINGS.keep_results), show_default=True,
              help="How long the journal keeps a meet's outcome for tacoma status (1h, 7d).")
@click.option("--journal-bytes", type=ByteSize(2**20), default=None,
              help="Bytes of async meets' briefcases and of results the journal keeps at "
                   "once; each identity may keep its --share of them, more are refused "
                   "(LimitExceeded). [default: a quarter of the state directory's disk, at "
                   "most 1G]")
@click.option("--lazy-bytes", type=ByteSize(0),
              default=format_size(_SETTINGS.lazy_bytes), show_default=True,
              help="Bytes of lazy folders' data the place keeps for its agents at once "
                   "(bc.lazy); past it, making a folder lazy is refused (LimitExceeded).")
@click.option("--cabinet-bytes", type=ByteSize(0), default=None,
              help="Bytes of cabinets the place keeps, of which any one identity may write "
                   "its --share; past either, a write is refused (LimitExceeded). [default: "
                   "a quarter of the state directory's disk, at most 1G]")
@click.option("--lazy-seconds", type=Duration(1),
              default=format_duration(_SETTINGS.lazy_seconds), show_default=True,
              help="How long the place keeps (or relays for its client) a lazy folder's "
                   "data for the meets that carry it; later reads fail (LazyFolderError).")
@click.option("--prefetch", type=click.IntRange(0, 64), default=_SETTINGS.prefetch,
              show_default=True,
              help="Chunks an agent here fetches after each run of lazy-folder chunks it "
                   "lacks (Accent's prefetch).")
@_timing("--handshake-timeout", "handshake_seconds", default=_SETTINGS.handshake_seconds,
         help="Drop a new connection that has not finished its TLS handshake this long "
              "after it was accepted.")
@_timing("--hello-timeout", "hello_seconds", default=_SETTINGS.hello_seconds,
         help="Close a connection that has not said Hello this long after its handshake "
              "(a client says it at once).")
@_timing("--rear-guard-every", default=_TRIPS.every,
         help="How long between the questions of an agent's rear guard to the place it "
              "moved on to (is the agent still there?).")
@_timing("--lost-after", default=_TRIPS.refused_for,
         help="Take the next place of a trip as lost with its agent once it has refused its "
              "rear guard's connections this long (its process is gone).")
@_timing("--silent-after", default=_TRIPS.silent_for,
         help="Take it as lost once it has left its rear guard's questions unanswered this "
              "long (a cut link, a dead host, a path losing most packets).")
@_timing("--hand-over-wait", default=_TRIPS.hand_over_wait,
         help="Send an agent's hand-over to the next place again, on a new connection, when "
              "it has had no answer for this long (a connection gone half open).")
@click.option("--agent-network", type=click.Choice(["none", "host"]), default="none",
              show_default=True,
              help="What network agents get: none (they reach other agents only through "
                   "the agent API: meet, send, go), or the host's.")
@click.option("--identity", metavar="NAME|FILE", default=None,
              help="The place's identity: a name in the trust directory, or an identity "
                   "file (tacoma trust issue NAME --place). [default on loopback: the "
                   "user's local place identity, made with a CA on first start]")
@click.option("--insecure", is_flag=True,
              help="No TLS and no authentication: anyone who reaches the port can run code "
                   "here. For a closed test network only; warned of at every start.")
@click.option("--allow", "allow", multiple=True, metavar="PRINCIPAL:AGENT_PATTERN",
              help="Let identities matching PRINCIPAL meet agents matching AGENT_PATTERN "
                   "(shell patterns). Repeatable; once one is given, meets no rule allows "
                   "are refused (NotAuthorized). [default: everyone may meet every agent]")
@click.option("--share", type=click.FloatRange(0, 1, min_open=True),
              default=_SETTINGS.share, show_default=True,
              help="The fraction of --max-connections and of --max-meets any one identity "
                   "may hold.")
@click.option("--deny-list", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Revoked certificates (tacoma trust revoke writes them), reread while the "
                   "place runs. [default: the trust directory's revoked file]")
@click.option("-q", "--quiet", is_flag=True, help="Log warnings and errors only.")
@click.option("-v", "--verbose", is_flag=True,
              help="Log every meet too (its agent, its principal, its peer).")
@click.option("--print-systemd-unit", is_flag=True,
              help="Print a systemd unit that runs this place as a service, with the other "
                   "options given here, and exit (state in /var/lib/tacoma, trust directory "
                   "/etc/tacoma/trust).")
def place(listen: str, state_dir: Path | None, pool_size: int, pool_max: int | None,
          reuse: str, instances_in_place: bool, instances_memory: int | None,
          warm_max: int, warm_meets: int,
          warm_seconds: float, max_frame: int, max_meets: int, max_connections: int,
          grace_seconds: float, mailbox_messages: int,
          mailbox_bytes: int, mailbox_total_bytes: int, same_uid: bool,
          max_receiving: int, idle_seconds: float, max_queued: int, keep_results: float,
          handshake_seconds: float, hello_seconds: float,
          rear_guard_every: float, lost_after: float, silent_after: float,
          hand_over_wait: float,
          journal_bytes: int | None, lazy_bytes: int, lazy_seconds: float, prefetch: int,
          agent_network: str, cabinet_bytes: int,
          identity: str | None, insecure: bool,
          allow: tuple[str, ...], share: float, deny_list: Path | None, quiet: bool,
          verbose: bool, print_systemd_unit: bool, **limits: Any) -> None:
    """Run a place: accept meets and run agents until SIGINT or SIGTERM.

    Every connection is mutual TLS: clients and other places must show a certificate of
    this place's CA (see tacoma trust). Prints one line on stdout once it accepts meets,
    then logs to stderr.
    """
    # Imported here, not at the top: no other command needs their 30 ms.
    import asyncio
    import logging

    from ..client._runtime import new_event_loop

    try:
        parse_address(listen, listen=True)
        settings = tacoma.PlaceSettings(
            listen=listen, state_dir=state_dir or default_state_dir(), pool_size=pool_size,
            pool_max=pool_max, reuse=reuse, warm_max=warm_max, warm_meets=warm_meets,
            warm_seconds=warm_seconds, max_frame=max_frame, max_meets=max_meets,
            max_connections=max_connections,
            grace_seconds=grace_seconds, mailbox_messages=mailbox_messages,
            mailbox_bytes=mailbox_bytes, mailbox_total_bytes=mailbox_total_bytes,
            limits=tacoma.Limits(**limits), separate_uids=not same_uid, identity=identity,
            insecure=insecure, allow=allow, share=share, deny_list=deny_list,
            agent_network=agent_network, idle_seconds=idle_seconds,
            trip_timings=TripTimings(rear_guard_every, lost_after, silent_after,
                                     hand_over_wait),
            handshake_seconds=handshake_seconds, hello_seconds=hello_seconds,
            max_receiving=max_receiving, max_queued=max_queued, keep_results=keep_results,
            journal_bytes=journal_bytes, lazy_bytes=lazy_bytes, lazy_seconds=lazy_seconds,
            prefetch=prefetch, cabinet_bytes=cabinet_bytes,
            instances_in_place=instances_in_place, instances_memory=instances_memory)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    if print_systemd_unit:
        from ..place._service import systemd_unit

        ctx = click.get_current_context()
        arguments = [a for a in ctx.meta[_ARGUMENTS] if a != "--print-systemd-unit"]
        try:
            click.echo(systemd_unit(settings, arguments, state_dir=state_dir), nl=False)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
        return
    level = logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO
    # Escaped and bounded: a log line shows what peers said (names, errors, ids).
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(SafeFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level, handlers=[handler])
    if verbose:  # the place's own meet log, not asyncio's and the rest's debug chatter
        logging.getLogger().setLevel(logging.INFO)
        logging.getLogger("tacoma").setLevel(logging.DEBUG)
    if insecure:
        click.echo("tacoma place: WARNING: --insecure: no TLS, no authentication; anyone "
                   "who can reach this place can run code on it", err=True)

    async def serve() -> None:
        place = tacoma.Place(settings)
        made_state_dir = not settings.state_dir.exists()
        try:
            address = await place.start()
        except OSError as exc:
            if exc.filename:
                raise click.ClickException(f"cannot use {exc.filename}: "
                                           f"{exc.strerror or exc}") from None
            if made_state_dir:  # made for this start, which ends here: nothing to keep
                shutil.rmtree(settings.state_dir, ignore_errors=True)
            raise CannotListen(listen, exc) from None
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, lambda: asyncio.ensure_future(place.stop()))
        click.echo(f"tacoma place listening on {address} "
                   f"(agents: {', '.join(place.agent_names())}; state: {settings.state_dir})")
        sys.stdout.flush()
        await place.wait_stopped()

    try:
        with asyncio.Runner(loop_factory=new_event_loop) as runner:
            runner.run(serve())
    except tacoma.TacomaError as exc:  # it could not start (its identity, its state dir)
        fail(exc)
    if settings.instances_in_place:
        _exit_now()


def _exit_now() -> NoReturn:
    """End a place that ran instances on its own threads, once it has stopped, without
    Python's finalization. The runtime keeps native threads of its own (wasmtime's WASI
    streams run on them), which call back into Python when they drop what a meet left: one
    that does so while the interpreter finalizes is ended by Python (a thread that takes the
    GIL then exits), the exit unwinds through frames that cannot unwind, and the process
    aborts (SIGABRT) after a clean stop. Everything the place writes is written by then;
    its log and output are flushed here."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


@click.command(short_help="Which languages and sandbox layers a place here has.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead.")
@click.option("--same-uid", is_flag=True, help="Report for a place run with --same-uid.")
@click.option("--agent-network", type=click.Choice(["none", "host"]), default="none",
              show_default=True, help="Report for a place run with this --agent-network.")
@click.option("--instances-in-place", is_flag=True,
              help="Report for a place run with --instances-in-place.")
def doctor(as_json: bool, same_uid: bool, agent_network: str, instances_in_place: bool) -> None:
    """Which languages a place here can run, and which layers of the sandbox it applies.

    For each language: its version, or why it cannot run and how to fix that; for a
    language whose every meet is a fresh instance of its runtime (WebAssembly), where those
    instances run and what that protects against. For each sandbox layer (uid per agent,
    namespaces, Landlock, seccomp, cgroups): applied, or why not, tried for real as a place
    run by this user would. Exits 0 if every installed interpreter can run, 1 otherwise (a
    layer that does not apply is reported, not an error: without root several cannot).
    """
    from ..agent._interpreter import discover_interpreters
    from ..place.workers._layers import probe

    report = []
    for agent, interpreter in sorted(discover_interpreters().items()):
        problem = interpreter.check()
        version = ""
        if problem is None:
            try:
                version = interpreter.version()
            except Exception as exc:  # noqa: BLE001 - a broken adapter is what doctor reports
                problem = f"cannot read its version: {exc}"
        runs_in = instances_mode(interpreter, instances_in_place)
        report.append({"agent": agent, "language": interpreter.language,
                       "suffixes": list(interpreter.suffixes), "ok": problem is None,
                       "version": version, "problem": problem or "",
                       "instances": runs_in or None})
    layers = [{"layer": layer.name, "applied": layer.applied, "detail": layer.detail}
              for layer in probe(not same_uid, agent_network, create=False).report]
    if as_json:
        click.echo(json.dumps({"interpreters": report, "layers": layers}))
    else:
        from ..display import table

        table(("OK", "AGENT", "LANGUAGE", "VERSION, OR WHY NOT"),
              [("ok" if row["ok"] else "no", row["agent"], row["language"],
                row["version"] if row["ok"] else row["problem"]) for row in report])
        for row in report:
            mode = row["instances"]
            if isinstance(mode, str):
                click.echo("\n" + click.wrap_text(f"{row['agent']}: {INSTANCES[mode]}",
                                                  width=96, subsequent_indent="  "))
        click.echo()
        table(("OK", "LAYER", "WHAT IT DOES, OR WHY NOT"),
              [("ok" if layer["applied"] else "no", layer["layer"], layer["detail"])
               for layer in layers],
              title="sandbox layers for a place run here by this user:")
    if not all(row["ok"] for row in report):
        sys.exit(1)


#: Where a language's instances run, and what that protects against, for `tacoma doctor`.
INSTANCES = {
    "workers": "each meet in a fresh instance of its runtime, in a confined worker process "
               "of the meet's principal. The instance keeps one meet from the next; the "
               "worker's sandbox layers (below) still stand if an agent escapes the runtime, "
               "and no principal's meets share a process with another's.",
    "place": "each meet in a fresh instance of its runtime, on a thread of the place's own "
             "process (--instances-in-place). The instance keeps one meet from the next, and "
             "the runtime's limits hold its CPU time, memory and output; no sandbox layer "
             "stands around it: an agent that escapes the runtime has the place's identity, "
             "every principal's meets and cabinets.",
}


def instances_mode(interpreter: Interpreter, in_place: bool) -> str:
    """Where a place here runs `interpreter`'s instances: "workers" or "place"; "" for a
    language whose meets are not instances."""
    if not interpreter.instances:
        return ""
    return "place" if in_place and interpreter.in_place is not None else "workers"


@click.command(short_help="Install a program as an agent at a place.")
@click.argument("program", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--name", help="Agent name to install as. [default: the file's name]")
@click.option("--trusted", is_flag=True,
              help="Run it in the place's own process, with no worker and no isolation, "
                   "for a quick service you vouch for (a directory, a cache). Python only; "
                   "the program defines meet(bc, principal).")
@state_dir_option()
def install(program: Path, name: str | None, trusted: bool, state_dir: Path | None) -> None:
    """Install PROGRAM as an agent at a place, to be met by name without shipping code.

    The language is told by the file's suffix (.py for Python). A running place sees the
    agent at its next meet.

    Every agent runs in a worker process of its own, isolated by the operating system,
    unless installed with --trusted: then the place loads it into its own process once and
    calls its meet(bc, principal) for each meet, keeping its state between meets. A trusted
    agent has the place's whole power and holds the place up while it runs: install only
    code you would run as the place's user.
    """
    from ..agent._interpreter import discover_interpreters

    interpreters = discover_interpreters()
    suffixes = {s: i for i in interpreters.values() for s in i.suffixes}
    if program.suffix not in suffixes:
        raise click.UsageError(f"{program}: no interpreter runs {program.suffix or 'suffix-less'}"
                               f" files; known suffixes: {', '.join(sorted(suffixes))}")
    interpreter = suffixes[program.suffix]
    name = name or program.stem
    if not name.isidentifier():
        raise click.UsageError(f"agent name {name!r} must be letters, digits and underscores")
    if name in {*RESERVED_AGENTS, *interpreters}:
        raise click.UsageError(f"{name} is a built-in agent; install under another name "
                               "(--name)")
    # What can be checked before it runs is checked now (Python, Tcl and Scheme parse, C
    # compiles), not at its first meet.
    if trusted:
        if interpreter.in_process is None:
            can = sorted(i.language for i in interpreters.values() if i.in_process)
            raise click.UsageError(
                f"{program}: a {interpreter.language} agent cannot be trusted: only "
                f"{' and '.join(can) or 'no'} agents run in the place's own process; "
                f"install it without --trusted and it runs in an isolated worker")
        problem = interpreter.in_process.check(program.read_bytes(), program.name)
    else:
        problem = interpreter.check_program(program.read_bytes(), program.name)
    if problem is not None:
        raise click.UsageError(f"{program} is not installed: {problem}")
    root = state_dir or default_state_dir()
    agents_dir = root / ("trusted" if trusted else "agents")
    agents_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    for old in [*(root / "agents").glob(f"{name}.*"), *(root / "trusted").glob(f"{name}.*")]:
        old.unlink()  # one agent per name, trusted or not
    target = agents_dir / f"{name}{program.suffix}"
    partial = agents_dir / f".{name}{program.suffix}.partial"
    shutil.copyfile(program, partial)
    partial.replace(target)  # a running place never reads it half written
    if trusted:
        click.echo(f"installed {name} ({interpreter.language}, trusted: it runs in the place's "
                   f"own process) at {target}")
        return
    click.echo(f"installed {name} ({interpreter.language}) at {target}")
