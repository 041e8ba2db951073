"""`tacoma meet` and `tacoma send`: a briefcase to an agent, or to a resident as a message.

Each is one call of the Python API (`tacoma.meet`, `tacoma.trace`, `tacoma.send`,
`tacoma.request`) between reading the briefcase from the arguments and printing what came
back; a bare agent name meets at the embedded place, as `tacoma.meet` does.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

import tacoma

from ..wire._address import split_target
from ._common import (
    FOLDER_HELP,
    FOLDER_METAVAR,
    briefcase_from,
    briefcase_json,
    fail,
    print_briefcase,
)
from ._trust import identity_options

__all__ = ["meet", "send"]


def _checked_target(target: str) -> str:
    try:
        split_target(target)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="TARGET") from None
    return target


@click.command()
@click.argument("target")
@click.option("--code", "code_path", type=click.Path(exists=True, dir_okay=False,
              path_type=Path), help="Put this file into the CODE folder (the agent's program).")
@click.option("-f", "--folder", "folders", multiple=True, metavar=FOLDER_METAVAR,
              help=FOLDER_HELP)
@click.option("--async", "is_async", is_flag=True,
              help="Return at once with the meet id instead of waiting for the agent.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Bound on the whole meet; the agent is killed when it passes.")
@click.option("--json", "as_json", is_flag=True,
              help='Print exactly one JSON object: {"folders": {NAME: [ELEMENT, ...]}}.')
@identity_options
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
    _checked_target(target)
    if traced and is_async:
        raise click.UsageError("--trace times a sync meet: it cannot be --async")
    if is_async and split_target(target)[1] is None:
        raise click.UsageError("an async meet needs a place that outlives this command (the "
                               "embedded place stops with it): give AGENT@HOST:PORT of a "
                               "place started with tacoma place")
    bc = briefcase_from(folders, code_path)
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
                click.echo(timed.table())
            return
        if is_async:
            meet_id = tacoma.meet(target, bc, mode="async", timeout=timeout)
            click.echo(json.dumps({"meet_id": meet_id}) if as_json else meet_id)
            return
        result = tacoma.meet(target, bc, timeout=timeout)
    except tacoma.TacomaError as exc:
        fail(exc)
        return
    if as_json:
        click.echo(json.dumps(briefcase_json(result)))
    else:
        print_briefcase(result)


@click.command()
@click.argument("target")
@click.option("-f", "--folder", "folders", multiple=True, metavar=FOLDER_METAVAR,
              help=FOLDER_HELP)
@click.option("--ack", "kind", flag_value="ack",
              help="Wait until the resident has taken the message.")
@click.option("--request", "kind", flag_value="request",
              help="Wait for the resident's reply, and print it.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Bound on waiting for the acknowledgement or the reply.")
@click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON object.")
@identity_options
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
    if _checked_target(target).startswith("ag_"):
        raise click.BadParameter("messages go to resident agents (NAME@PLACE); ag_ names "
                                 "are agents, met with tacoma meet", param_hint="TARGET")
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
            click.echo(json.dumps({"message_id": sent}) if as_json else sent)
            return
        sent.result()
        click.echo(json.dumps({"acknowledged": True}) if as_json else "acknowledged")
    except tacoma.TacomaError as exc:
        fail(exc)
