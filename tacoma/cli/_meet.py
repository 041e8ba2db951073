"""`tacoma meet` and `tacoma send`: a briefcase to an agent, or to a resident as a message.

Each is one call of the Python API (`tacoma.meet`, `tacoma.trace`, `tacoma.send`,
`tacoma.request`) between reading the briefcase from the arguments and printing what came
back. A target without @PLACE goes to the default place (`$TACOMA_PLACE`, else
127.0.0.1:7707), but for `tacoma meet AGENT` with no $TACOMA_PLACE: that meets at the
embedded place, as `tacoma.meet` does (the README's first command relies on it).

Ctrl-C during a sync meet cancels it at the place and says so (exit 130): the CLI names the
meet itself (`meet_id=`), and then asks the place whether the meet still runs, so that what
it says of the agent is what the place says (`client._status.cancelled`, which the
notebook's `%%meet` says too).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import click

import tacoma

from ..client._identity import Terms
from ..wire._address import split_target
from ..wire._briefcase import FRESH
from ..wire._text import escape
from ._common import (
    FOLDER_HELP,
    FOLDER_METAVAR,
    INTERRUPTED_STATUS,
    PLACE_ENV,
    Duration,
    briefcase_from,
    briefcase_json,
    fail,
    print_briefcase,
    report,
    with_place,
)
from ._trust import identity_options

__all__ = ["meet", "send"]

def _meet_target(target: str) -> str:
    """The target to meet: AGENT@PLACE as given; a bare AGENT at $TACOMA_PLACE if set, else
    (None) at the embedded place."""
    placed = with_place(target)  # checks it: a place given as the agent is a usage error
    return placed if "@" in target or os.environ.get(PLACE_ENV, "").strip() else target


def _cancelled(meet_id: str, place: str | None) -> None:
    """Say that an interrupted meet was cancelled, and whether its agent is known stopped;
    exit 130."""
    from ..client._status import cancelled

    started = True
    if place is None:
        from ..place._embedded import embedded_running

        started = embedded_running()  # interrupted before it started: nothing ran
    message, hint = cancelled(meet_id, place, started=started)
    report("Cancelled", message, hint=hint, status=INTERRUPTED_STATUS)


@click.command(short_help="Meet an agent with a briefcase and print the result.")
@click.argument("target", metavar="AGENT[@PLACE]")
@click.option("--code", "code_path", type=click.Path(exists=True, dir_okay=False,
              path_type=Path), help="Put this file into the CODE folder (the agent's program).")
@click.option("-f", "--folder", "folders", multiple=True, metavar=FOLDER_METAVAR,
              help=FOLDER_HELP)
@click.option("--async", "is_async", is_flag=True,
              help="Return at once with the meet id instead of waiting for the agent.")
@click.option("--timeout", type=Duration(positive=True),
              help="Bound on the whole meet (30, 30s, 5m, 2h); the agent is killed when it "
                   "passes.")
@click.option("--json", "as_json", is_flag=True,
              help='Print exactly one JSON object: {"folders": {NAME: [ELEMENT, ...]}} (a '
                   'failure: {"error": {...}}).')
@identity_options
@click.option("--trace", "traced", is_flag=True,
              help="Also print the time of each step of the meet, on the client, the place "
                   "and the agent's worker (with --json: a \"trace\" list).")
@click.option("--progress/--no-progress", default=None,
              help="Show a moving agent's hops on stderr as it goes (default: for a "
                   "briefcase with an ITINERARY, when stderr is a terminal; --progress also "
                   "prints them as lines to a pipe or log).")
@click.option("--places", "places", multiple=True, metavar="PATTERN",
              help="A place the agent's passport lets it visit: HOST:PORT or a place's "
                   "identity name, shell patterns allowed (repeatable; default: any place "
                   "of the cluster).")
@click.option("--program", "programs", multiple=True, metavar="FILE",
              help="A program (its file) that agents this one starts elsewhere may run for "
                   "you besides its own (repeatable; '*': any program).")
@click.option("--may", "may", metavar="WHAT,...",
              help="What the agent's passport lets it do for you at other places, of meet, "
                   "move, cabinet, lazy and status (default: all).")
@click.option("--fresh", is_flag=True,
              help="Run the agent in a fresh worker process, never a warm one that served "
                   "you before (puts a FRESH folder in the briefcase: every place it goes "
                   "to does the same).")
def meet(target: str, code_path: Path | None, folders: tuple[str, ...], is_async: bool,
         timeout: float | None, as_json: bool, traced: bool, progress: bool | None,
         places: tuple[str, ...], programs: tuple[str, ...], may: str | None,
         fresh: bool) -> None:
    """Meet AGENT (at PLACE, HOST:PORT) with a briefcase and print the result.

    A bare AGENT meets at $TACOMA_PLACE if it is set, else at an embedded place started
    for this command, with the same isolation as any place. Ctrl-C cancels the meet at
    the place (its agent is stopped) and exits with status 130.

    \b
    Examples:
      tacoma meet ag_python@127.0.0.1:7707 --code examples/hello/hello.py -f NAME=world
      tacoma meet ag_echo@127.0.0.1:7707 -f X=1 --json
      tacoma meet ag_python --code examples/hello/hello.py -f PHOTO=@examples/hello/tacoma.png
      tacoma meet ag_python@127.0.0.1:7707 --code examples/hello/hello.py --trace
      tacoma meet ag_python@A --code examples/roam/roam.py -f ITINERARY=B -f ITINERARY=C
      tacoma meet ag_python@A --code roam.py -f ITINERARY=B --places B --may move
    """
    target = _meet_target(target)
    place = split_target(target)[1]
    if traced and is_async:
        raise click.UsageError("--trace times a sync meet: it cannot be --async")
    if is_async and place is None:
        raise click.UsageError("an async meet needs a place that outlives this command (the "
                               "embedded place stops with it): give AGENT@HOST:PORT of a "
                               "place started with tacoma place (or set $TACOMA_PLACE)")
    bc = briefcase_from(folders, code_path)
    if fresh:
        bc[FRESH] = [b""]
    chosen = [m.strip() for m in may.split(",") if m.strip()] if may is not None else None
    files: list[str | bytes] = []
    for program in programs:
        if program != "*":
            try:
                files.append(Path(program).read_bytes())
            except OSError as exc:
                raise click.BadParameter(f"cannot read {program}: {exc.strerror or exc}",
                                         param_hint="--program") from None
    sources: list[str | bytes] | str = "*" if "*" in programs else files
    try:
        Terms.of(places or None, chosen, sources)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--places/--may") from None
    passport: dict[str, Any] = {"places": places or None, "may": chosen,
                                "programs": sources or None}
    try:
        if traced:
            timed = tacoma.trace(target, bc, timeout=timeout)
            if as_json:
                click.echo(json.dumps({**briefcase_json(timed.briefcase), "trace": [
                    {"side": side, "step": step, "seconds": seconds}
                    for side, step, seconds in timed.steps], "total": timed.total}))
            else:
                print_briefcase(timed.briefcase)
                click.echo()
                sys.stdout.flush()  # the table is printed by rich, past click's echo
                timed.table()
            return
        if is_async:
            meet_id = tacoma.meet(target, bc, mode="async", timeout=timeout, **passport)
            click.echo(json.dumps({"meet_id": meet_id}) if as_json else escape(meet_id))
            return
        from ..client._identity import new_meet_id

        meet_id = new_meet_id()  # named here, to be named if it is interrupted
        try:
            result = tacoma.meet(target, bc, timeout=timeout, meet_id=meet_id,
                                 progress=progress, **passport)
        except KeyboardInterrupt:  # cancelled at the place by tacoma.meet
            _cancelled(meet_id, place)
            return
    except tacoma.TacomaError as exc:
        fail(exc, place=place)
    if as_json:
        click.echo(json.dumps(briefcase_json(result)))
    else:
        print_briefcase(result)


@click.command(short_help="Send a message to a resident agent.")
@click.argument("target", metavar="NAME[@PLACE]")
@click.option("-f", "--folder", "folders", multiple=True, metavar=FOLDER_METAVAR,
              help=FOLDER_HELP)
@click.option("--ack", "kind", flag_value="ack",
              help="Wait until the resident has taken the message.")
@click.option("--request", "kind", flag_value="request",
              help="Wait for the resident's reply, and print it.")
@click.option("--timeout", type=Duration(positive=True),
              help="Bound on waiting for the acknowledgement or the reply (30, 30s, 5m).")
@click.option("--json", "as_json", is_flag=True,
              help='Print exactly one JSON object (a failure: {"error": {...}}).')
@identity_options
def send(target: str, folders: tuple[str, ...], kind: str | None, timeout: float | None,
         as_json: bool) -> None:
    """Send a message (a briefcase) to the resident agent NAME at PLACE (HOST:PORT;
    default: $TACOMA_PLACE, else 127.0.0.1:7707).

    By default one-way: prints the message id once it is in the resident's mailbox.
    A full mailbox exits with status 13, an unknown resident with 4.

    \b
    Examples:
      tacoma send echo@127.0.0.1:7707 -f TEXT=hello
      tacoma send echo@127.0.0.1:7707 -f TEXT=hello --ack
      tacoma send echo -f TEXT=hello --request --json
    """
    target = with_place(target, "NAME", "NAME[@PLACE]")
    name, place = split_target(target)
    if name.startswith("ag_"):
        raise click.BadParameter("messages go to resident agents (NAME@PLACE); ag_ names "
                                 "are agents, met with tacoma meet",
                                 param_hint="NAME[@PLACE]")
    bc = briefcase_from(folders)
    try:
        if kind == "request":
            reply = tacoma.request(target, bc, timeout=timeout)
            if as_json:
                click.echo(json.dumps(briefcase_json(reply)))
            else:
                print_briefcase(reply)
            return
        sent = tacoma.send(target, bc, ack=kind == "ack", timeout=timeout)
        if isinstance(sent, str):
            click.echo(json.dumps({"message_id": sent}) if as_json else escape(sent))
            return
        from ..client._runtime import result_of

        result_of(sent)  # the ack; Ctrl-C must reach it however long it takes
        click.echo(json.dumps({"acknowledged": True}) if as_json else "acknowledged")
    except tacoma.TacomaError as exc:
        fail(exc, place=place)
