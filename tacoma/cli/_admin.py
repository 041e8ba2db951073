"""`tacoma ps` and `tacoma kill`: a place's administrator looking at its agents, stopping one.

Both (and `tacoma status PLACE`, see _status) are meets of the place's ag_admin, made by
an identity with the admin role (the user's own identity is one: see tacoma trust), or
carrying the admin token that the place writes to its state directory each time it starts
(or a copy of it, for a place on another host).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

import tacoma

from ..display import table
from ..place._settings import default_state_dir
from ..wire._address import parse_address
from ..wire._text import escape
from ._common import CommandFunction, default_place, fail, state_dir_option, with_place
from ._trust import chosen_identity, identity_options

__all__ = ["admin_options", "admin_token", "agents_table", "checked_place", "kill", "ps",
           "ps_rows"]


def admin_options(f: CommandFunction) -> CommandFunction:
    """--state-dir and --token-file: where the place's admin token is."""
    f = click.option("--token-file", type=click.Path(dir_okay=False, path_type=Path),
                     default=None, help="The place's admin token file (a copy, for a place "
                     "on another host).")(f)
    return state_dir_option("The place's state directory, where its admin token is.")(f)


def checked_place(place: str | None) -> str:
    """PLACE as given (checked: HOST:PORT), or the default place."""
    if place is None:
        return default_place()
    try:
        parse_address(place)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="PLACE") from None
    return place


def admin_token(place: str, state_dir: Path | None, token_file: Path | None) -> str | None:
    """The admin token to show place `place`, if it can be read (an identity with the admin
    role needs none).

    The token of the default state directory belongs to a place on this host: it is sent
    only to a loopback address, never to a place elsewhere (which could collect it), and
    not when an identity was chosen (--identity, $TACOMA_IDENTITY): that identity acts as
    itself, with the role it has.
    """
    if chosen_identity() and token_file is None and state_dir is None:
        return None
    path = token_file or tacoma.PlaceSettings(state_dir=state_dir or default_state_dir()) \
        .admin_token_file
    host = place.rpartition(":")[0].strip("[]")
    if token_file is not None or state_dir is not None or host in (
            "127.0.0.1", "::1", "localhost") or host.startswith("127."):
        try:
            return path.read_text().strip()
        except OSError as exc:
            if token_file is not None:
                raise click.UsageError(f"cannot read the place's admin token at {path}: "
                                       f"{exc.strerror or exc}") from None
            # An identity with the admin role needs none.
    return None


def _admin(place: str, state_dir: Path | None, token_file: Path | None,
           **folders: list[bytes | str]) -> tacoma.Briefcase:
    """A request to the place's ag_admin, with its admin token if it can be read."""
    token = admin_token(place, state_dir, token_file)
    return tacoma.meet(f"ag_admin@{place}", tacoma.Briefcase(
        TOKEN=[token] if token is not None else [], **folders), timeout=30)


@click.command(short_help="List the agents running at a place.")
@click.argument("place", required=False, metavar="[PLACE]")
@admin_options
@identity_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def ps(place: str | None, state_dir: Path | None, token_file: Path | None,
       as_json: bool) -> None:
    """List the agents running at PLACE (HOST:PORT; default: $TACOMA_PLACE, else
    127.0.0.1:7707), resident ones by name.

    Needs an identity with the admin role (your own is one), or the place's admin token: a
    place writes a new one to admin.token in its state directory each time it starts,
    readable only by the place's user. The token of the default state directory is shown
    to a place on loopback unasked, unless an identity is chosen (--identity,
    $TACOMA_IDENTITY): that identity then acts as itself.
    """
    place = checked_place(place)
    try:
        rows = ps_rows(place, _admin(place, state_dir, token_file, OP=["ps"]).folder("AGENTS"))
    except tacoma.TacomaError as exc:
        fail(exc, place=place)
    if as_json:
        click.echo(json.dumps({"agents": rows}))
        return
    if not rows:
        click.echo(f"no agents running at {place}")
        return
    agents_table(rows)


#: What every row of `tacoma ps` holds, and its type.
_ROW: dict[str, type | tuple[type, ...]] = {
    "meet": str, "name": str, "agent": str, "language": str, "pid": int, "processes": int,
    "age": (int, float), "cpu": (int, float), "rss": int}


def ps_rows(place: str, elements: list[bytes]) -> list[dict[str, Any]]:
    """The place's rows for `tacoma ps`, checked: a broken or hostile place gets a protocol
    error, not a traceback."""
    try:
        rows = [json.loads(e) for e in elements]
        for row in rows:
            if not isinstance(row, dict) or not all(isinstance(row.get(k), t)
                                                    for k, t in _ROW.items()):
                raise ValueError(f"a row is not one of ps: {str(row)[:200]}")
            if not (row.get("mailbox") is None or isinstance(row["mailbox"], int)):
                raise ValueError("a row's mailbox is not a count")
            if not all(isinstance(row.get(k, ""), str) for k in ("principal", "via", "worker")):
                raise ValueError("a row's principal is not a name")
    except ValueError as exc:
        raise tacoma.RemoteProtocolError(f"place {place} answered ps with what tacoma cannot "
                                         f"read: {exc}") from None
    return rows


def agents_table(rows: list[dict[str, Any]]) -> None:
    """`tacoma ps`'s table of the place's rows (its cells escaped, as every table's).
    Meet ids are per principal: each row says whose (and the place that vouched for it)."""
    table(("MEET", "PRINCIPAL", "NAME", "AGENT", "LANGUAGE", "WORKER", "PID", "PROCS", "AGE",
           "CPU", "MEMORY", "NET", "MAILBOX"), [(
               r["meet"], _whose(r), r["name"] or "-", r["agent"], r["language"],
               r.get("worker", "-"), r["pid"] or "-", r["processes"], f"{r['age']:.1f}s",
               f"{r['cpu']:.2f}s", f"{r['rss'] / 2**20:.1f}M", r.get("network", "-"),
               "-" if r["mailbox"] is None else r["mailbox"],
           ) for r in rows], right=("PID", "PROCS", "AGE", "CPU", "MEMORY", "MAILBOX"))


def _whose(row: dict[str, Any]) -> str:
    """A row's principal, and the place that vouched for it if one did."""
    principal = row.get("principal") or "-"
    return f"{principal} via {row['via']}" if row.get("via") else principal


@click.command(short_help="Stop a resident agent or a meet at a place.")
@click.argument("target", metavar="NAME[@PLACE]")
@click.option("--principal", default=None, metavar="PRINCIPAL",
              help="NAME is a meet id of this principal's (ids are per principal: tacoma "
                   "ps shows whose each meet is).")
@admin_options
@identity_options
def kill(target: str, principal: str | None, state_dir: Path | None,
         token_file: Path | None) -> None:
    """Stop an agent: NAME is a resident agent's name or a meet id (see tacoma ps), at
    PLACE (default: $TACOMA_PLACE, else 127.0.0.1:7707).

    Meet ids are per principal: a NAME that is the id of meets of several principals, or
    a resident's name and a meet's id, is refused; say whose meet with --principal.

    Its processes are killed; whoever waits for its meet gets AgentKilled.

    Needs an identity with the admin role (your own is one), or the place's admin token
    (see tacoma ps).
    """
    name, _, place = with_place(target, "NAME", "NAME[@PLACE]").rpartition("@")
    try:
        killed = _admin(place, state_dir, token_file, OP=["kill"], NAME=[name],
                        PRINCIPAL=[principal] if principal is not None else [])
    except tacoma.TacomaError as exc:
        fail(exc, place=place)
    said = killed.text("KILLED") if killed.folder("KILLED") else []
    if len(said) != 1:
        fail(tacoma.RemoteProtocolError(f"place {place} answered kill without the meet it "
                                        "stopped"), place=place)
    # The meet id is the place's word, and the name was typed (or pasted): both escaped.
    whose = f" of {principal}" if principal is not None else ""
    click.echo(escape(f"killed {name} (meet {said[0]}{whose}) at {place}"))
