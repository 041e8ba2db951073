"""`tacoma status`: a place in one screen (`tacoma.place_status`), or what became of a meet,
asked by its id (`tacoma.status`, `tacoma.result`).

One command for both, told apart by the argument: a meet is MEET_ID@HOST:PORT, a place is
HOST:PORT, and no argument is the default place (`$TACOMA_PLACE`, else 127.0.0.1:7707).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import click

import tacoma

from ..wire._text import escape
from ._admin import admin_options, admin_token, checked_place
from ._common import (
    Duration,
    briefcase_json,
    fail,
    print_briefcase,
)
from ._trust import identity_options

__all__ = ["status"]


@click.command()
@click.argument("target", metavar="[PLACE | MEET_ID@PLACE]", required=False)
@click.option("--wait", type=Duration(), default=None, is_flag=False, flag_value=3600.0,
              help="A meet's: wait up to DURATION (30, 5m; --wait alone: an hour) for it to "
                   "end.")
@click.option("--principal", default=None, metavar="PRINCIPAL",
              help="A meet's: the principal whose meet it is (ids are per principal), for "
                   "an identity with the admin role asking about another's meet.")
@click.option("--json", "as_json", is_flag=True,
              help='Print exactly one JSON object: a place\'s status, or a meet\'s '
                   '{"meet_id", "state", "agent", "runs", "folders" (when done) or "error" '
                   '(when failed)}.')
@admin_options
@identity_options
def status(target: str | None, wait: float | None, principal: str | None, as_json: bool,
           state_dir: Path | None, token_file: Path | None) -> None:
    """A place in one screen, or what became of a meet.

    PLACE (HOST:PORT; none: $TACOMA_PLACE, else 127.0.0.1:7707): its address, version and
    uptime, the sandbox layers it applies, its worker pools, meets running, queued and
    ended, its resident agents and their mailboxes, its cabinets. Like tacoma ps, it needs
    an identity with the admin role (your own is one) or the place's admin token
    (--state-dir, --token-file).

    MEET_ID@PLACE: queued, running, done (and print its result), failed (and exit with its
    error's status) or unknown (exit 18). A place keeps the async meets it accepted, the
    trips that began there and the sync meets whose caller's connection was lost, with each
    one's outcome for a while after it ended (tacoma place --keep-results). tacoma meet
    prints a meet's id with --async, and names it when a sync meet's connection is lost.
    Ids are per principal: the meet is your identity's own, or, with --principal (an
    identity with the admin role), that principal's.

    \b
    Examples:
      tacoma status
      tacoma status 127.0.0.1:7707 --json
      tacoma status p4Rk2xV9_cLm0sQe@127.0.0.1:7707
      tacoma status p4Rk2xV9_cLm0sQe@127.0.0.1:7707 --wait 60 --json
      tacoma status nightly-report@127.0.0.1:7707 --principal alice
    """
    if target is None or "@" not in target:
        if wait is not None:
            raise click.UsageError("--wait waits for a meet: give MEET_ID@HOST:PORT")
        if principal is not None:
            raise click.UsageError("--principal names whose meet it is: give "
                                   "MEET_ID@HOST:PORT")
        if target is not None and ":" not in target:
            raise click.BadParameter(
                f"{target!r} is neither a place (HOST:PORT) nor a meet (MEET_ID@HOST:PORT)",
                param_hint="PLACE | MEET_ID@PLACE")
        _place_summary(checked_place(target), state_dir, token_file, as_json)
        return
    meet_id, _, place = target.partition("@")
    if not meet_id or not place:
        raise click.BadParameter("give the meet's id and its place: MEET_ID@HOST:PORT",
                                 param_hint="MEET_ID@PLACE")
    try:
        found = tacoma.status(target, wait=wait or 0.0, principal=principal)
    except tacoma.TacomaError as exc:
        fail(exc, place=place)
    if as_json:
        out: dict[str, object] = {"meet_id": found.id, "place": found.place,
                                  "state": found.state, "agent": found.agent,
                                  "runs": found.runs, "accepted": found.accepted,
                                  "ended": found.ended}
        if principal is not None:
            out["principal"] = principal
        if found.hops is not None:
            out["trip"] = {"hops": found.hops, "at": found.at}
        if found.path:
            out["path"] = [dataclasses.asdict(step) for step in found.path]
        if found.result is not None:
            out.update(briefcase_json(found.result))
        if found.error is not None:
            out["error"] = {"kind": found.error.kind, "message": found.error.message,
                            "detail": found.error.detail}
        click.echo(json.dumps(out))
    else:
        runs = f", started {found.runs} times" if found.runs > 1 else ""
        agent = f" ({found.agent}{runs})" if found.agent else ""
        trip = (f"; its trip has made {found.hops} hops, last heard at {found.at}"
                if found.hops is not None else "")
        # The place's words (its agent's name, where a trip was heard of), escaped.
        whose = f" of {principal}" if principal is not None else ""
        click.echo(escape(f"meet {found.id}{whose} at {found.place}: {found.state}{agent}"
                          f"{trip}"), err=found.result is not None)
        if found.path:  # each line signed by the place that handed the agent on
            click.echo("the path its result took (each hand-over signed by its place):",
                       err=found.result is not None)
            for number, step in enumerate(found.path, 1):
                click.echo(escape(f"  {number}. {step}"), err=found.result is not None)
        if found.result is not None:
            print_briefcase(found.result)
    # Under --json the object above is the one on stdout, its "error" the meet's.
    if found.error is not None:
        fail(found.error, as_json=False)
    if found.state == "unknown":
        fail(found.no_record(), as_json=False)


def _place_summary(place: str, state_dir: Path | None, token_file: Path | None,
                   as_json: bool) -> None:
    from ..client._place_status import place_status

    try:
        summary = place_status(place, token=admin_token(place, state_dir, token_file))
    except tacoma.TacomaError as exc:
        fail(exc, place=place)
    if as_json:
        click.echo(json.dumps(summary.data))
    else:
        summary.show()
