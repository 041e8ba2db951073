"""`tacoma ps` and `tacoma kill`: a place's administrator looking at its agents, stopping one.

Both are meets of the place's ag_admin, made by an identity with the admin role (the
user's own identity is one: see tacoma trust), or carrying the admin token that the place
writes to its state directory each time it starts (or a copy of it, for a place on another
host).
"""

from __future__ import annotations

import json
from pathlib import Path

import click

import tacoma

from ..place._settings import DEFAULT_LISTEN, default_state_dir
from ._common import CommandFunction, fail, state_dir_option
from ._trust import identity_options

__all__ = ["kill", "ps"]


def _admin_options(f: CommandFunction) -> CommandFunction:
    """--state-dir and --token-file: where the place's admin token is."""
    f = click.option("--token-file", type=click.Path(dir_okay=False, path_type=Path),
                     default=None, help="The place's admin token file (a copy, for a place "
                     "on another host).")(f)
    return state_dir_option("The place's state directory, where its admin token is.")(f)


def _admin(place: str, state_dir: Path | None, token_file: Path | None,
           **folders: list[bytes | str]) -> tacoma.Briefcase:
    """A request to the place's ag_admin, with its admin token if it can be read (an
    identity with the admin role needs none).

    The token of the default state directory belongs to a place on this host: it is sent
    only to a loopback address, never to a place elsewhere (which could collect it).
    """
    path = token_file or tacoma.PlaceSettings(state_dir=state_dir or default_state_dir()) \
        .admin_token_file
    host = place.rpartition(":")[0].strip("[]")
    token: list[bytes | str] = []
    if token_file is not None or state_dir is not None or host in (
            "127.0.0.1", "::1", "localhost") or host.startswith("127."):
        try:
            token = [path.read_text().strip()]
        except OSError as exc:
            if token_file is not None:
                raise click.UsageError(f"cannot read the place's admin token at {path}: "
                                       f"{exc.strerror or exc}") from None
            # An identity with the admin role needs none.
    return tacoma.meet(f"ag_admin@{place}", tacoma.Briefcase(TOKEN=token, **folders),
                       timeout=30)


@click.command()
@click.argument("place", default=DEFAULT_LISTEN, metavar="[PLACE]")
@_admin_options
@identity_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def ps(place: str, state_dir: Path | None, token_file: Path | None, as_json: bool) -> None:
    """List the agents running at PLACE (HOST:PORT), resident ones by name.

    Needs the place's admin token: a place writes a new one to admin.token in its state
    directory each time it starts, readable only by the place's user.
    """
    try:
        rows = [json.loads(e) for e in _admin(place, state_dir, token_file,
                                              OP=["ps"]).folder("AGENTS")]
    except tacoma.TacomaError as exc:
        fail(exc)
        return
    if as_json:
        click.echo(json.dumps({"agents": rows}))
        return
    if not rows:
        click.echo(f"no agents running at {place}")
        return
    header = ("MEET", "NAME", "AGENT", "LANGUAGE", "PID", "PROCS", "AGE", "CPU", "MEMORY",
              "NET", "MAILBOX")
    table = [header] + [(
        r["meet"], r["name"] or "-", r["agent"], r["language"], str(r["pid"]),
        str(r["processes"]), f"{r['age']:.1f}s", f"{r['cpu']:.2f}s",
        f"{r['rss'] / 2**20:.1f}M", r.get("network", "-"),
        "-" if r["mailbox"] is None else str(r["mailbox"]),
    ) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        click.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths,
                                                                        strict=True)).rstrip())


@click.command()
@click.argument("target", metavar="NAME@PLACE")
@_admin_options
@identity_options
def kill(target: str, state_dir: Path | None, token_file: Path | None) -> None:
    """Stop an agent: NAME is a resident agent's name or a meet id (see tacoma ps).

    Its processes are killed; whoever waits for its meet gets AgentKilled.
    """
    name, _, place = target.rpartition("@")
    if not name or not place:
        raise click.BadParameter("expected NAME@HOST:PORT", param_hint="NAME@PLACE")
    try:
        killed = _admin(place, state_dir, token_file, OP=["kill"], NAME=[name])
    except tacoma.TacomaError as exc:
        fail(exc)
        return
    click.echo(f"killed {name} (meet {killed.text('KILLED')[0]}) at {place}")
