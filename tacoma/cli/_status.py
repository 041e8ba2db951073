"""`tacoma status`: what became of a meet, asked by its id (`tacoma.status`, `tacoma.result`)."""

from __future__ import annotations

import json
import sys

import click

import tacoma

from ._common import briefcase_json, exit_code, fail, print_briefcase
from ._trust import identity_options

__all__ = ["status"]


@click.command()
@click.argument("target", metavar="MEET_ID@HOST:PORT")
@click.option("--wait", type=click.FloatRange(min=0), default=None, metavar="SECONDS",
              is_flag=False, flag_value=3600.0,
              help="Wait up to SECONDS (--wait alone: an hour) for the meet to end.")
@click.option("--json", "as_json", is_flag=True,
              help='Print exactly one JSON object: {"meet_id", "state", "agent", "runs", '
                   '"folders" (when done) or "error" (when failed)}.')
@identity_options
def status(target: str, wait: float | None, as_json: bool) -> None:
    """Say what became of meet MEET_ID at a place: queued, running, done (and print its
    result), failed (and exit with its error's status) or unknown (exit 18).

    A place keeps the async meets it accepted, the trips that began there and the sync
    meets whose caller's connection was lost, with each one's outcome for a while after it
    ended (tacoma place --keep-results). tacoma meet prints a meet's id with --async, and
    names it when a sync meet's connection is lost.

    \b
    Examples:
      tacoma status p4Rk2xV9_cLm0sQe@127.0.0.1:7707
      tacoma status p4Rk2xV9_cLm0sQe@127.0.0.1:7707 --wait 60 --json
    """
    if "@" not in target:
        raise click.BadParameter("give the meet's id and its place: MEET_ID@HOST:PORT",
                                 param_hint="MEET_ID@HOST:PORT")
    try:
        found = tacoma.status(target, wait=wait or 0.0)
    except tacoma.TacomaError as exc:
        fail(exc)
        return
    if as_json:
        out: dict[str, object] = {"meet_id": found.id, "place": found.place,
                                  "state": found.state, "agent": found.agent,
                                  "runs": found.runs, "accepted": found.accepted,
                                  "ended": found.ended}
        if found.result is not None:
            out.update(briefcase_json(found.result))
        if found.error is not None:
            out["error"] = {"kind": found.error.kind, "message": found.error.message,
                            "detail": found.error.detail}
        click.echo(json.dumps(out))
    else:
        runs = f", started {found.runs} times" if found.runs > 1 else ""
        agent = f" ({found.agent}{runs})" if found.agent else ""
        click.echo(f"meet {found.id} at {found.place}: {found.state}{agent}",
                   err=found.result is not None)
        if found.result is not None:
            print_briefcase(found.result)
    if found.error is not None:
        if as_json:
            sys.exit(exit_code(found.error))
        fail(found.error)
    if found.state == "unknown":
        if as_json:
            sys.exit(exit_code(found.no_record()))
        fail(found.no_record())
