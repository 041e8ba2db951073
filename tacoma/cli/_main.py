"""The `tacoma` command: a thin face over the Python API (Place, meet, Briefcase).

Exit status: 0 on success, 2 for usage errors (click's), and for a failed meet one status
per kind of failure (EXIT_CODES), with a one-line message on stderr, followed by the agent's
traceback or the place's detail where there is one.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import shutil
import signal
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import click

from .._version import __version__
from ..place._settings import DEFAULT_LISTEN, Limits, PlaceSettings, default_state_dir
from ..wire._briefcase import CODE, Briefcase, check_folder_name
from ..wire._errors import (
    AgentFailed,
    AgentKilled,
    CabinetError,
    ConnectError,
    LimitExceeded,
    MailboxFull,
    MeetError,
    MeetTimeout,
    MessageError,
    NotAllowed,
    PlaceUnavailable,
    ProtocolError,
    TacomaError,
    TransportError,
    UnknownAgent,
)

__all__ = ["main"]

#: Exit status per failure, most specific first (checked in order).
EXIT_CODES: list[tuple[type[BaseException], int]] = [
    (ConnectError, 3),
    (UnknownAgent, 4),
    (AgentFailed, 5),
    (AgentKilled, 6),
    (MeetTimeout, 7),
    (LimitExceeded, 9),
    (ProtocolError, 8),
    (PlaceUnavailable, 10),
    (TransportError, 11),
    (CabinetError, 12),
    (MailboxFull, 13),
    (MessageError, 14),
    (NotAllowed, 15),
    (MeetError, 1),
    (TacomaError, 1),
]


def _exit_code(exc: BaseException) -> int:
    return next(code for cls, code in EXIT_CODES if isinstance(exc, cls))


def _fail(exc: TacomaError) -> None:
    """Print a failed meet as one line (plus detail) on stderr and exit with its status."""
    name = type(exc).__name__.lstrip("_")
    if isinstance(exc, LimitExceeded):
        name = "LimitExceeded"
    elif isinstance(exc, ProtocolError):
        name = "ProtocolError"
    click.echo(f"tacoma: {name}: {exc}", err=True)
    detail = getattr(exc, "detail", "")
    if detail:
        click.echo(detail.rstrip("\n"), err=True)
    sys.exit(_exit_code(exc))


# ---------------------------------------------------------------------------- briefcase I/O
def _parse_folder_arg(value: str) -> tuple[str, bytes]:
    name, sep, content = value.partition("=")
    if not sep:
        raise click.BadParameter(f"{value!r}: expected NAME=TEXT or NAME=@PATH")
    try:
        check_folder_name(name)
    except (TypeError, ValueError) as exc:
        raise click.BadParameter(str(exc)) from None
    if content.startswith("@"):
        path = Path(content[1:])
        try:
            return name, path.read_bytes()
        except OSError as exc:
            raise click.BadParameter(f"{name}=@{path}: cannot read: {exc.strerror}") from None
    return name, content.encode("utf-8")


def _element_json(element: bytes) -> Any:
    try:
        return element.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(element).decode("ascii")}


def briefcase_json(bc: Briefcase) -> dict[str, Any]:
    """The --json form: {"folders": {NAME: [str | {"base64": ...}, ...]}}."""
    return {"folders": {name: [_element_json(e) for e in elements]
                        for name, elements in bc.items()}}


def _printable(text: str) -> bool:
    return all(c.isprintable() or c in "\n\t\r" for c in text)


def _describe_element(element: bytes) -> str:
    try:
        text = element.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and _printable(text):
        return text
    preview = element[:16].hex(" ")
    more = " ..." if len(element) > 16 else ""
    return f"<{len(element):,} bytes of binary: {preview}{more}>"


#: Lines of one text element shown before the rest is summarised.
SHOWN_LINES = 20


def print_briefcase(bc: Briefcase) -> None:
    """A briefcase as a person reads it: each folder, its element count, its elements.

    The CODE folder is summarised (the caller has the program already) and long text is
    cut after SHOWN_LINES lines; --json shows everything.
    """
    if not bc:
        click.echo("(empty briefcase)")
    for name, elements in bc.items():
        count = f"{len(elements)} element" + ("" if len(elements) == 1 else "s")
        click.echo(click.style(name, bold=True) + f" ({count})")
        for element in elements:
            if name == CODE:
                click.echo(f"  <program, {len(element):,} bytes>")
                continue
            lines = _describe_element(element).splitlines() or [""]
            if len(lines) > SHOWN_LINES:
                lines = [*lines[:SHOWN_LINES], f"... ({len(lines) - SHOWN_LINES} more lines)"]
            click.echo("  " + "\n  ".join(lines))


# ---------------------------------------------------------------------------- commands
@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tacoma")
def main() -> None:
    """tacoma: mobile agents. Run a place, meet agents at it."""


@main.command()
@click.argument("target")
@click.option("--code", "code_path", type=click.Path(exists=True, dir_okay=False,
              path_type=Path), help="Put this file into the CODE folder (the agent's program).")
@click.option("-f", "--folder", "folders", multiple=True, metavar="NAME=TEXT|NAME=@PATH",
              help="Append TEXT (UTF-8), or the bytes of PATH, to folder NAME. Repeatable.")
@click.option("--async", "is_async", is_flag=True,
              help="Return at once with the meet id instead of waiting for the agent.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Bound on the whole meet; the agent is killed when it passes.")
@click.option("--json", "as_json", is_flag=True,
              help='Print exactly one JSON object: {"folders": {NAME: [ELEMENT, ...]}}.')
@click.option("--trace", "traced", is_flag=True,
              help="Also print the time of each step of the meet, on the client, the place "
                   "and the agent's worker (with --json: a \"trace\" list).")
def meet(target: str, code_path: Path | None, folders: tuple[str, ...], is_async: bool,
         timeout: float | None, as_json: bool, traced: bool) -> None:
    """Meet TARGET (AGENT@HOST:PORT) with a briefcase and print the result.

    With no @HOST:PORT the meet runs at an embedded place started for this command,
    with the same isolation as any place.

    \b
    Examples:
      tacoma meet ag_python@127.0.0.1:7707 --code agent.py -f NAME=world
      tacoma meet ag_echo@127.0.0.1:7707 -f X=1 --json
      tacoma meet ag_python --code agent.py -f BLOB=@photo.jpg
      tacoma meet ag_python@127.0.0.1:7707 --code agent.py --trace
    """
    from ..client._client import meet as do_meet
    from ..client._client import trace as do_trace

    _checked_target(target)
    if traced and is_async:
        raise click.UsageError("--trace times a sync meet: it cannot be --async")
    bc = _briefcase_from(folders, code_path)
    try:
        if traced:
            timed = do_trace(target, bc, timeout=timeout)
            if as_json:
                click.echo(json.dumps({**briefcase_json(timed.briefcase), "trace": [
                    {"side": side, "step": step, "seconds": seconds}
                    for side, step, seconds in timed.steps], "total": timed.total}))
            else:
                print_briefcase(timed.briefcase)
                click.echo()
                click.echo(timed.table())
            return
        if is_async:
            meet_id = do_meet(target, bc, mode="async", timeout=timeout)
            click.echo(json.dumps({"meet_id": meet_id}) if as_json else meet_id)
            return
        result = do_meet(target, bc, timeout=timeout)
    except TacomaError as exc:
        _fail(exc)
        return
    if as_json:
        click.echo(json.dumps(briefcase_json(result)))
    else:
        print_briefcase(result)


def _briefcase_from(folders: tuple[str, ...], code_path: Path | None = None) -> Briefcase:
    bc = Briefcase()
    if code_path is not None:
        bc[CODE] = [code_path.read_bytes()]
    for value in folders:
        name, element = _parse_folder_arg(value)
        bc.append(name, element)
    return bc


def _checked_target(target: str) -> str:
    from ..wire._address import split_target

    try:
        split_target(target)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="TARGET") from None
    return target


@main.command()
@click.argument("target")
@click.option("-f", "--folder", "folders", multiple=True, metavar="NAME=TEXT|NAME=@PATH",
              help="Append TEXT (UTF-8), or the bytes of PATH, to folder NAME. Repeatable.")
@click.option("--ack", "kind", flag_value="ack",
              help="Wait until the resident has taken the message.")
@click.option("--request", "kind", flag_value="request",
              help="Wait for the resident's reply, and print it.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Bound on waiting for the acknowledgement or the reply.")
@click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON object.")
def send(target: str, folders: tuple[str, ...], kind: str | None, timeout: float | None,
         as_json: bool) -> None:
    """Send a message (a briefcase) to the resident agent TARGET (NAME@HOST:PORT).

    By default one-way: prints the message id once it is in the resident's mailbox.
    A full mailbox exits with status 13, an unknown resident with 4.

    \b
    Examples:
      tacoma send echo@127.0.0.1:7707 -f TEXT=hello
      tacoma send echo@127.0.0.1:7707 -f TEXT=hello --ack
      tacoma send echo@127.0.0.1:7707 -f TEXT=hello --request --json
    """
    from ..client._client import request as do_request
    from ..client._client import send as do_send

    if _checked_target(target).startswith("ag_"):
        raise click.BadParameter("messages go to resident agents (NAME@PLACE); ag_ names "
                                 "are agents, met with tacoma meet", param_hint="TARGET")
    bc = _briefcase_from(folders)
    try:
        if kind == "request":
            reply = do_request(target, bc, timeout=timeout)
            if as_json:
                click.echo(json.dumps(briefcase_json(reply)))
            else:
                print_briefcase(reply)
            return
        sent = do_send(target, bc, ack=kind == "ack", timeout=timeout)
        if isinstance(sent, str):
            click.echo(json.dumps({"message_id": sent}) if as_json else sent)
            return
        sent.result()
        click.echo(json.dumps({"acknowledged": True}) if as_json else "acknowledged")
    except TacomaError as exc:
        _fail(exc)


_ADMIN_OPTIONS = [
    click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path),
                 default=None, help="The place's state directory, where its admin token is. "
                 f"[default: {default_state_dir()}]"),
    click.option("--token-file", type=click.Path(dir_okay=False, path_type=Path),
                 default=None, help="The place's admin token file (a copy, for a place "
                 "on another host)."),
]


def _admin_options(f: Any) -> Any:
    for option in reversed(_ADMIN_OPTIONS):
        f = option(f)
    return f


def _admin(place: str, state_dir: Path | None, token_file: Path | None,
           **folders: list[bytes | str]) -> Briefcase:
    """A request to the place's ag_admin with its admin token."""
    from ..client._client import meet as do_meet

    path = token_file or PlaceSettings(state_dir=state_dir or default_state_dir()) \
        .admin_token_file
    try:
        token = path.read_text().strip()
    except OSError as exc:
        raise click.UsageError(f"cannot read the place's admin token at {path}: "
                               f"{exc.strerror or exc} (give the place's --state-dir, or "
                               "--token-file)") from None
    return do_meet(f"ag_admin@{place}", Briefcase(TOKEN=[token], **folders), timeout=30)


@main.command()
@click.argument("place", default=DEFAULT_LISTEN, metavar="[PLACE]")
@_admin_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def ps(place: str, state_dir: Path | None, token_file: Path | None, as_json: bool) -> None:
    """List the agents running at PLACE (HOST:PORT), resident ones by name.

    Needs the place's admin token: a place writes a new one to admin.token in its state
    directory each time it starts, readable only by the place's user.
    """
    try:
        rows = [json.loads(e) for e in _admin(place, state_dir, token_file,
                                              OP=["ps"]).folder("AGENTS")]
    except TacomaError as exc:
        _fail(exc)
        return
    if as_json:
        click.echo(json.dumps({"agents": rows}))
        return
    if not rows:
        click.echo(f"no agents running at {place}")
        return
    header = ("MEET", "NAME", "AGENT", "LANGUAGE", "PID", "PROCS", "AGE", "CPU", "MEMORY",
              "MAILBOX")
    table = [header] + [(
        r["meet"], r["name"] or "-", r["agent"], r["language"], str(r["pid"]),
        str(r["processes"]), f"{r['age']:.1f}s", f"{r['cpu']:.2f}s",
        f"{r['rss'] / 2**20:.1f}M", "-" if r["mailbox"] is None else str(r["mailbox"]),
    ) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        click.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths,
                                                                        strict=True)).rstrip())


@main.command()
@click.argument("target", metavar="NAME@PLACE")
@_admin_options
def kill(target: str, state_dir: Path | None, token_file: Path | None) -> None:
    """Stop an agent: NAME is a resident agent's name or a meet id (see tacoma ps).

    Its processes are killed; whoever waits for its meet gets AgentKilled.
    """
    name, _, place = target.rpartition("@")
    if not name or not place:
        raise click.BadParameter("expected NAME@HOST:PORT", param_hint="NAME@PLACE")
    try:
        killed = _admin(place, state_dir, token_file, OP=["kill"], NAME=[name])
    except TacomaError as exc:
        _fail(exc)
        return
    click.echo(f"killed {name} (meet {killed.text('KILLED')[0]}) at {place}")


@main.command()
@click.argument("names", nargs=-1, metavar="[NAME]...")
@click.option("--quick", is_flag=True,
              help="Loop sizes 1, 10, 30 (hops 4, 40) and 1 s sustained runs: under a "
                   "minute. Otherwise the paper's 1 to 1000 (4 to 4000) and 10 s.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write every measurement (each loop size's total and average "
                   "time, the rates, the parameters) to this file.")
@click.option("--places", metavar="A,B,C,D",
              help="Four places to run at (HOST:PORT, comma-separated). Default: four "
                   "local places started for the run.")
@click.option("--language", type=click.Choice(["python", "tcl", "scheme", "c"]),
              default="python", show_default=True,
              help="Language of the agents created, dispatched and moved.")
@click.option("--clients", type=click.IntRange(1, 64), default=3, show_default=True,
              help="Clients of PROXY and FORW-MSG (the paper: 3, 6, 12).")
@click.option("--servers", type=click.IntRange(1, 16), default=3, show_default=True,
              help="Servers of PROXY and FORW-MSG.")
@click.option("--agent-size", "agent_bytes", type=click.IntRange(0, 16 * 2**20), default=0,
              show_default=True, help="Bytes of data every created, dispatched or moved "
              "agent carries (beside its program).")
@click.option("--message-size", "message_bytes", type=click.IntRange(1, 16 * 2**20),
              default=1, show_default=True, help="Bytes every message carries.")
@click.option("--isolation", type=click.Choice(["default", "same-uid", "no-pool"]),
              default="default", show_default=True,
              help="How the local places isolate agents: their default (a uid per agent "
                   "as root, pre-started workers), --same-uid, or --pool-size 0.")
@click.option("--details", is_flag=True,
              help="Also print each loop size's total and average time.")
@click.option("--plot", "plot_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Also draw the paper's figures for this run, as PNG files in this "
                   "directory (needs matplotlib: pip install 'tacoma[plot]').")
def bench(names: tuple[str, ...], quick: bool, json_path: Path | None, places: str | None,
          language: str, clients: int, servers: int, agent_bytes: int, message_bytes: int,
          isolation: str, details: bool, plot_dir: Path | None) -> None:
    """Run the mobile-agent benchmark suite and print it beside the published systems.

    NAMES are benchmarks of the suite (all by default): the micro-benchmarks CL, CR, AD,
    MSG-1W, MSG-2W, SYNCH, MSG-MA and the micro-kernels ROAM, PROXY, FORW-MSG, FORW-MA
    of Dikaiakos, Kyriakou and Samaras. The table is the shape of their Table 8: our
    peak and sustained rates, then Concordia's, Aglets' and Voyager's from the paper.
    Every rate is measured here, and only after a check that the work was done.

    `tacoma bench overhead` measures PAN's ActiveOverhead instead: a plain msgpack
    request/reply against meets of ag_echo and of a Python agent, per briefcase size and
    isolation setting. `tacoma bench breakdown` traces meets and prints the median of
    each step of the meet's path beside TACOMA 1.3's Table 1.

    \b
    Examples:
      tacoma bench --quick
      tacoma bench ROAM SYNCH --json bench.json
      tacoma bench --places 10.0.0.1:7707,10.0.0.2:7707,10.0.0.3:7707,10.0.0.4:7707
      tacoma bench overhead --quick
      tacoma bench breakdown
    """
    from .. import bench as _bench

    # SIGTERM ends the run as Ctrl-C does: the local places it started are stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if plot_dir is not None:
        _pyplot_or_fail()
    if [n.lower() for n in names] == ["overhead"]:
        _bench_overhead(quick, json_path, plot_dir)
        return
    if [n.lower() for n in names] == ["breakdown"]:
        _bench_breakdown(quick, json_path, places, plot_dir)
        return

    try:
        the_plan = _bench.plan([n.upper() for n in names], quick)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="NAME") from None
    addresses = [a.strip() for a in places.split(",")] if places else None
    if addresses is not None and len(addresses) != 4:
        raise click.BadParameter("give four places: A,B,C,D", param_hint="--places")
    estimate = sum(the_plan.estimate(n) for n in the_plan.names)
    click.echo(f"tacoma bench: {len(the_plan.names)} benchmarks, "
               f"{'quick' if quick else 'full'} run, about {estimate / 60:.1f} minutes "
               "(an estimate for a 2-core machine)", err=True)
    try:
        results = _bench.run(the_plan, addresses, language, clients,
                             lambda line: click.echo(f"  {line}", err=True), servers=servers,
                             agent_bytes=agent_bytes, message_bytes=message_bytes,
                             isolation=isolation)
    except (TacomaError, _bench.BenchmarkFailed) as exc:
        raise click.ClickException(f"the benchmark failed: {exc}") from None
    click.echo(_bench.table(results))
    if details:
        click.echo()
        click.echo(_bench.details(results))
    if json_path is not None:
        json_path.write_text(_bench.dumps(results))
        click.echo(f"measurements written to {json_path}", err=True)
    if plot_dir is not None:
        from ..bench._plot import plot_suite

        for path in plot_suite([r for r in results if not r.failure], plot_dir):
            click.echo(f"wrote {path}", err=True)
    if any(r.failure for r in results):
        sys.exit(1)


def _pyplot_or_fail() -> None:
    """Fail before a long run, not after it, if plots were asked for and cannot be drawn."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise click.UsageError("--plot needs matplotlib: pip install 'tacoma[plot]'") \
            from None


def _bench_breakdown(quick: bool, json_path: Path | None, places: str | None,
                     plot_dir: Path | None) -> None:
    from ..bench._breakdown import breakdown, breakdown_table

    meets = 20 if quick else 200
    click.echo(f"tacoma bench breakdown: {meets} traced meets of ag_python, 0.1 s apart, "
               f"about {meets * 0.11 + 2:.0f} s", err=True)
    try:
        medians, total = breakdown(meets, place=places.split(",")[0] if places else None)
    except (TacomaError, RuntimeError) as exc:
        raise click.ClickException(f"the benchmark failed: {exc}") from None
    click.echo(breakdown_table(medians, total))
    if json_path is not None:
        json_path.write_text(json.dumps({"breakdown": [
            {"side": side, "step": step, "median_us": us}
            for (side, step), us in medians.items()], "total_median_us": total}, indent=2))
    if plot_dir is not None:
        from ..bench._plot import plot_breakdown

        click.echo(f"wrote {plot_breakdown(medians, plot_dir)}", err=True)


def _bench_overhead(quick: bool, json_path: Path | None, plot_dir: Path | None) -> None:
    import dataclasses

    from ..bench._overhead import measure_overhead, overhead_table

    click.echo(f"tacoma bench overhead: {'quick' if quick else 'full'} run, about "
               f"{'20 s' if quick else '2 minutes'}", err=True)
    try:
        rows = measure_overhead(quick, lambda line: click.echo(f"  {line}", err=True))
    except (TacomaError, RuntimeError, OSError) as exc:
        raise click.ClickException(f"the benchmark failed: {exc}") from None
    click.echo(overhead_table(rows))
    if json_path is not None:
        json_path.write_text(json.dumps({"overhead": [
            {**dataclasses.asdict(r), "echo_overhead": r.echo_overhead,
             "agent_overhead": r.agent_overhead} for r in rows]}, indent=2))
    if plot_dir is not None:
        from ..bench._plot import plot_overhead

        click.echo(f"wrote {plot_overhead(rows, plot_dir)}", err=True)


def _limits_options(f: Any) -> Any:
    defaults = Limits()
    options = [
        click.option("--cpu-seconds", type=click.IntRange(min=1),
                     default=defaults.cpu_seconds, show_default=True,
                     help="CPU time limit of each agent process."),
        click.option("--memory", "memory_bytes", type=click.IntRange(min=64 * 2**20),
                     default=defaults.memory_bytes, show_default=True,
                     help="Address-space limit of each agent process, in bytes."),
        click.option("--file-size", "file_bytes", type=click.IntRange(min=1),
                     default=defaults.file_bytes, show_default=True,
                     help="Largest file an agent may write, in bytes."),
        click.option("--open-files", type=click.IntRange(min=16),
                     default=defaults.open_files, show_default=True,
                     help="Open file descriptors per agent."),
        click.option("--processes", type=click.IntRange(min=1),
                     default=defaults.processes, show_default=True,
                     help="Processes and threads per agent."),
        click.option("--meet-seconds", type=click.FloatRange(min=0, min_open=True),
                     default=defaults.meet_seconds, show_default=True,
                     help="Wall-clock bound on any meet at this place."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


@main.command()
@click.option("--listen", default=DEFAULT_LISTEN, show_default=True, metavar="HOST:PORT",
              help="Address to accept meets on (port 0 picks a free port).")
@click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path),
              default=None, help=f"What the place keeps. [default: {default_state_dir()}]")
@click.option("--pool-size", type=click.IntRange(0, 64), default=2, show_default=True,
              help="Pre-started workers kept ready per language.")
@click.option("--max-briefcase", "max_frame", type=click.IntRange(min=65536),
              default=PlaceSettings().max_frame, show_default=True,
              help="Largest briefcase (frame) accepted or sent, in bytes.")
@click.option("--max-meets", type=click.IntRange(min=1), default=256, show_default=True,
              help="Meets running at once; more are refused.")
@click.option("--max-connections", type=click.IntRange(min=1), default=1024,
              show_default=True, help="Client connections open at once; more are refused.")
@click.option("--grace", "grace_seconds", type=click.FloatRange(min=0), default=10.0,
              show_default=True, help="On SIGINT/SIGTERM, seconds running meets may finish in.")
@click.option("--mailbox-messages", type=click.IntRange(min=1),
              default=PlaceSettings().mailbox_messages, show_default=True,
              help="Messages waiting for any one resident agent; more are refused.")
@click.option("--mailbox-bytes", type=click.IntRange(min=1),
              default=PlaceSettings().mailbox_bytes, show_default=True,
              help="Bytes of messages waiting for any one resident agent.")
@click.option("--mailbox-total-bytes", type=click.IntRange(min=1),
              default=PlaceSettings().mailbox_total_bytes, show_default=True,
              help="Bytes of messages waiting at the place, for all residents together.")
@_limits_options
@click.option("--same-uid", is_flag=True,
              help="As root, run agents as root too (unsafe: they can then signal the place "
                   "and read whatever root may). By default each agent gets a uid of its own.")
@click.option("-q", "--quiet", is_flag=True, help="Log warnings and errors only.")
def place(listen: str, state_dir: Path | None, pool_size: int, max_frame: int,
          max_meets: int, max_connections: int, grace_seconds: float, mailbox_messages: int,
          mailbox_bytes: int, mailbox_total_bytes: int, same_uid: bool, quiet: bool,
          **limits: Any) -> None:
    """Run a place: accept meets and run agents until SIGINT or SIGTERM.

    Prints one line on stdout once it accepts meets, then logs to stderr.
    """
    from ..client._runtime import new_event_loop
    from ..place._place import Place
    from ..wire._address import parse_address

    try:
        parse_address(listen, listen=True)
        settings = PlaceSettings(
            listen=listen, state_dir=state_dir or default_state_dir(), pool_size=pool_size,
            max_frame=max_frame, max_meets=max_meets, max_connections=max_connections,
            grace_seconds=grace_seconds, mailbox_messages=mailbox_messages,
            mailbox_bytes=mailbox_bytes, mailbox_total_bytes=mailbox_total_bytes,
            limits=Limits(**limits), separate_uids=not same_uid)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    logging.basicConfig(level=logging.WARNING if quiet else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    async def serve() -> None:
        place = Place(settings)
        try:
            address = await place.start()
        except OSError as exc:
            if exc.filename:
                raise click.ClickException(f"cannot use {exc.filename}: "
                                           f"{exc.strerror or exc}") from None
            raise click.ClickException(f"cannot listen on {listen}: {exc.strerror or exc}") \
                from None
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, lambda: asyncio.ensure_future(place.stop()))
        click.echo(f"tacoma place listening on {address} "
                   f"(agents: {', '.join(place.agent_names())}; state: {settings.state_dir})")
        sys.stdout.flush()
        await place.wait_stopped()

    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        runner.run(serve())


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead.")
def doctor(as_json: bool) -> None:
    """Which languages a place here can run, their versions, and why one cannot.

    Exits 0 if every installed interpreter can run, 1 otherwise.
    """
    from ..agent._interpreter import discover_interpreters

    report = []
    for agent, interpreter in sorted(discover_interpreters().items()):
        problem = interpreter.check()
        version = ""
        if problem is None:
            try:
                version = interpreter.version()
            except Exception as exc:  # noqa: BLE001 - a broken adapter is what doctor reports
                problem = f"cannot read its version: {exc}"
        report.append({"agent": agent, "language": interpreter.language,
                       "suffixes": list(interpreter.suffixes), "ok": problem is None,
                       "version": version, "problem": problem or ""})
    if as_json:
        click.echo(json.dumps({"interpreters": report}))
    else:
        for row in report:
            mark = click.style("ok", fg="green") if row["ok"] else click.style("no", fg="red")
            detail = row["version"] if row["ok"] else row["problem"]
            click.echo(f"{mark:>2}  {row['agent']:<12} {row['language']:<8} {detail}")
    if not all(row["ok"] for row in report):
        sys.exit(1)


@main.command()
@click.argument("program", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--name", help="Agent name to install as. [default: the file's name]")
@click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help=f"The place's state directory. [default: {default_state_dir()}]")
def install(program: Path, name: str | None, state_dir: Path | None) -> None:
    """Install PROGRAM as an agent at a place, to be met by name without shipping code.

    The language is told by the file's suffix (.py for Python). A running place sees the
    agent at its next meet.
    """
    from ..agent._interpreter import discover_interpreters

    suffixes = {s: i for i in discover_interpreters().values() for s in i.suffixes}
    if program.suffix not in suffixes:
        raise click.UsageError(f"{program}: no interpreter runs {program.suffix or 'suffix-less'}"
                               f" files; known suffixes: {', '.join(sorted(suffixes))}")
    name = name or program.stem
    if not name.isidentifier():
        raise click.UsageError(f"agent name {name!r} must be letters, digits and underscores")
    from ..wire._names import RESERVED_AGENTS

    builtin = {*RESERVED_AGENTS, *discover_interpreters()}
    if name in builtin:
        raise click.UsageError(f"{name} is a built-in agent; install under another name "
                               "(--name)")
    agents_dir = (state_dir or default_state_dir()) / "agents"
    agents_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    for old in agents_dir.glob(f"{name}.*"):
        old.unlink()
    target = agents_dir / f"{name}{program.suffix}"
    shutil.copyfile(program, target)
    click.echo(f"installed {name} ({suffixes[program.suffix].language}) at {target}")


# ---------------------------------------------------------------------------- cabinets
_STATE_DIR = click.option(
    "--state-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
    help=f"The place's state directory. [default: {default_state_dir()}]")


@main.group()
def cabinet() -> None:
    """Inspect and change a place's cabinets (its SQLite database, read directly).

    For the place's administrator: private cabinets are shown and changeable too. A running
    place sees changes at once (the database is shared safely).
    """


def _open_store(state_dir: Path | None) -> Any:
    from ..place._cabinets import Store

    path = (state_dir or default_state_dir()) / "cabinets.sqlite3"
    if not path.exists():
        raise click.UsageError(f"no cabinets at {path.parent} (no place has run there)")
    try:
        return Store(path)
    except sqlite3.Error as exc:
        raise click.ClickException(f"cannot open {path}: {exc}") from None


def _checked(name: str, what: str = "cabinet") -> str:
    from ..place._cabinets import check_name

    try:
        return check_name(name, what)
    except TacomaError as exc:
        raise click.BadParameter(str(exc)) from None


@cabinet.command("list")
@_STATE_DIR
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def cabinet_list(state_dir: Path | None, as_json: bool) -> None:
    """The cabinets at a place: name, owner, folders, last change."""
    store = _open_store(state_dir)
    rows = []
    for name in store.names(None, everything=True):
        owner, _, updated = store.info(name)
        rows.append({"name": name, "owner": owner, "folders": store.folders(name, admin=True),
                     "updated": updated})
    store.close()
    if as_json:
        click.echo(json.dumps({"cabinets": rows}))
        return
    if not rows:
        click.echo("(no cabinets)")
    for row in rows:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(row["updated"]))
        owner = "public"
        if row["owner"]:
            short = row["owner"] if len(row["owner"]) <= 26 else row["owner"][:25] + "…"
            owner = f"private to {short}"
        click.echo(f"{row['name']:<24} {owner:<37} {len(row['folders']):>3} folders  {when}")


@cabinet.command("show")
@click.argument("name")
@click.argument("folders", nargs=-1)
@_STATE_DIR
@click.option("--json", "as_json", is_flag=True,
              help='Print one JSON object: {"folders": {NAME: [ELEMENT, ...]}}.')
def cabinet_show(name: str, folders: tuple[str, ...], state_dir: Path | None,
                 as_json: bool) -> None:
    """Print a cabinet's folders (all, or the FOLDERS named)."""
    store = _open_store(state_dir)
    if store.info(_checked(name)) is None:
        store.close()
        raise click.UsageError(f"no cabinet {name!r}")
    bc = Briefcase()
    for folder in folders or store.folders(name, admin=True):
        bc.replace(folder, store.read(name, folder, admin=True))
    store.close()
    if as_json:
        click.echo(json.dumps(briefcase_json(bc)))
    else:
        print_briefcase(bc)


@cabinet.command("put")
@click.argument("name")
@click.option("-f", "--folder", "folders", multiple=True, required=True,
              metavar="NAME=TEXT|NAME=@PATH",
              help="Append TEXT (UTF-8), or the bytes of PATH, to folder NAME. Repeatable.")
@click.option("--replace", is_flag=True, help="Replace the folders instead of appending.")
@_STATE_DIR
def cabinet_put(name: str, folders: tuple[str, ...], replace: bool,
                state_dir: Path | None) -> None:
    """Write folders into cabinet NAME (created, public, if it does not exist)."""
    data: dict[str, list[bytes]] = {}
    for value in folders:
        folder, element = _parse_folder_arg(value)
        data.setdefault(_checked(folder, "folder"), []).append(element)
    store = _open_store(state_dir)
    store.write(_checked(name), data, replace, None, admin=True)
    store.close()
    count = sum(len(v) for v in data.values())
    click.echo(f"{'replaced' if replace else 'appended'} {count} element"
               f"{'' if count == 1 else 's'} in cabinet {name}")


@cabinet.command("rm")
@click.argument("name")
@click.argument("folders", nargs=-1)
@_STATE_DIR
def cabinet_rm(name: str, folders: tuple[str, ...], state_dir: Path | None) -> None:
    """Remove cabinet NAME, or only the FOLDERS named."""
    store = _open_store(state_dir)
    if store.info(_checked(name)) is None:
        store.close()
        raise click.UsageError(f"no cabinet {name!r}")
    store.remove(name, list(folders) or None, None, admin=True)
    store.close()
    click.echo(f"removed {'folders ' + ', '.join(folders) + ' of ' if folders else ''}"
               f"cabinet {name}")
