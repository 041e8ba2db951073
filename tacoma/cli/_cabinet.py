"""`tacoma cabinet`: a place's cabinets for its administrator, read from its database.

No meet and no running place is needed: the commands open the place's SQLite database (the
cabinet `Store` the place itself uses) with administrator rights, so private cabinets are
shown and changeable too, and `claim` names the principal of a private cabinet made before
cabinets belonged to a principal. A running place sees the changes at once. What the
database holds was written by agents: names and owners are printed escaped.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

import tacoma

from ..place._settings import default_state_dir
from ..wire._text import escape, shown
from ._common import briefcase_json, parse_folder_arg, print_briefcase, state_dir_option

if TYPE_CHECKING:
    from ..place._cabinets import Cabinet, Store

__all__ = ["cabinet"]


@click.group(short_help="Inspect and change a place's cabinets.")
def cabinet() -> None:
    """Inspect and change a place's cabinets (its SQLite database, read directly).

    For the place's administrator: private cabinets are shown and changeable too. A running
    place sees changes at once (the database is shared safely).
    """


def _open_store(state_dir: Path | None) -> Store:
    # Imported here: the cabinets module brings asyncio, which no other command needs.
    import sqlite3

    from ..place._cabinets import Store

    path = (state_dir or default_state_dir()) / "cabinets.sqlite3"
    if not path.exists():
        raise click.UsageError(f"no cabinets at {path.parent} (no place has run there)")
    try:
        return Store(path)
    except (sqlite3.Error, tacoma.TacomaError) as exc:
        raise click.ClickException(f"cannot open {path}: {exc}") from None


def _owner(cabinet: Cabinet) -> str:
    """Who a cabinet is private to, as the list prints it (escaped: the agents' words)."""
    if cabinet.program is None:
        return "public"
    if cabinet.principal is None:
        return f"private to {escape(cabinet.program)}, for a principal not yet named (claim)"
    return f"private to {escape(cabinet.program)} for {shown(cabinet.principal)}"


def _checked(name: str, what: str = "cabinet") -> str:
    from ..place._cabinets import check_name

    try:
        return check_name(name, what)
    except tacoma.TacomaError as exc:
        raise click.BadParameter(str(exc)) from None


@cabinet.command("list")
@state_dir_option()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def cabinet_list(state_dir: Path | None, as_json: bool) -> None:
    """The cabinets at a place: name, owner (program and principal), folders, last change."""
    store = _open_store(state_dir)
    rows: list[dict[str, Any]] = []
    owners: list[str] = []
    for name in store.names(None):
        info = store.info(name)
        if info is None:  # removed since it was listed
            continue
        rows.append({"name": name, "owner": info.program, "principal": info.principal,
                     "folders": store.folders(name, None), "updated": info.updated})
        owners.append(_owner(info))
    store.close()
    if as_json:
        click.echo(json.dumps({"cabinets": rows}))
        return
    if not rows:
        click.echo("(no cabinets)")
        return
    from ..display import table

    table(("CABINET", "OWNER", "FOLDERS", "CHANGED"), [(
        escape(row["name"]), owner, len(row["folders"]),
        time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(row["updated"])),
    ) for row, owner in zip(rows, owners, strict=True)], right=("FOLDERS",))


@cabinet.command("show")
@click.argument("name")
@click.argument("folders", nargs=-1)
@state_dir_option()
@click.option("--json", "as_json", is_flag=True,
              help='Print one JSON object: {"folders": {NAME: [ELEMENT, ...]}}.')
def cabinet_show(name: str, folders: tuple[str, ...], state_dir: Path | None,
                 as_json: bool) -> None:
    """Print a cabinet's folders (all, or the FOLDERS named)."""
    store = _open_store(state_dir)
    if store.info(_checked(name)) is None:
        store.close()
        raise click.UsageError(f"no cabinet {name!r}")
    bc = tacoma.Briefcase()
    for folder in folders or store.folders(name, None):
        bc.replace(folder, store.read(name, folder, None))
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
@state_dir_option()
def cabinet_put(name: str, folders: tuple[str, ...], replace: bool,
                state_dir: Path | None) -> None:
    """Write folders into cabinet NAME (created, public, if it does not exist)."""
    data: dict[str, list[bytes]] = {}
    for value in folders:
        folder, element = parse_folder_arg(value)
        data.setdefault(_checked(folder, "folder"), []).append(element)
    store = _open_store(state_dir)
    try:
        store.write(_checked(name), data, replace, None)
    except tacoma.TacomaError as exc:  # the disk is full: nothing was written
        raise click.ClickException(str(exc)) from None
    finally:
        store.close()
    count = sum(len(v) for v in data.values())
    click.echo(f"{'replaced' if replace else 'appended'} {count} element"
               f"{'' if count == 1 else 's'} in cabinet {name}")


@cabinet.command("rm")
@click.argument("name")
@click.argument("folders", nargs=-1)
@state_dir_option()
def cabinet_rm(name: str, folders: tuple[str, ...], state_dir: Path | None) -> None:
    """Remove cabinet NAME, or only the FOLDERS named."""
    store = _open_store(state_dir)
    if store.info(_checked(name)) is None:
        store.close()
        raise click.UsageError(f"no cabinet {name!r}")
    try:
        store.remove(name, list(folders) or None, None)
    except tacoma.TacomaError as exc:  # the disk is full: nothing was removed
        raise click.ClickException(str(exc)) from None
    finally:
        store.close()
    click.echo(f"removed {'folders ' + ', '.join(folders) + ' of ' if folders else ''}"
               f"cabinet {name}")


@cabinet.command("claim")
@click.argument("name")
@click.option("--principal", required=True, metavar="NAME",
              help="The identity the cabinet belongs to, with the program that made it "
                   "(\"\" on an --insecure place, where nobody is authenticated).")
@state_dir_option()
def cabinet_claim(name: str, principal: str, state_dir: Path | None) -> None:
    """Name the principal a private cabinet belongs to.

    A private cabinet belongs to the program that made it run for one principal. One made
    before that (by an older tacoma) has no principal, and no agent may use it until it is
    named here: then the same program, run for that principal, may. Naming another one
    gives the cabinet to it instead.
    """
    from ..place._cabinets import check_name

    if escape(principal) != principal:
        raise click.BadParameter(f"{shown(principal)} has characters no identity's name has",
                                 param_hint="--principal")
    store = _open_store(state_dir)
    try:
        before = store.claim(check_name(name), principal)
    except tacoma.CabinetError as exc:
        raise click.UsageError(str(exc)) from None
    except tacoma.TacomaError as exc:  # the disk is full: nothing was written
        raise click.ClickException(str(exc)) from None
    finally:
        store.close()
    assert before.program is not None  # claim refuses a public cabinet
    was = "" if before.principal is None else f" (was {shown(before.principal)})"
    click.echo(f"cabinet {name} is private to {escape(before.program)} for {shown(principal)}"
               f"{was}")
