"""`tacoma cabinet`: a place's cabinets for its administrator, read from its database.

No meet and no running place is needed: the commands open the place's SQLite database (the
cabinet `Store` the place itself uses) with administrator rights, so private cabinets are
shown and changeable too. A running place sees the changes at once.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

import tacoma

from ..place._settings import default_state_dir
from ._common import briefcase_json, parse_folder_arg, print_briefcase, state_dir_option

if TYPE_CHECKING:
    from ..place._cabinets import Store

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
    except sqlite3.Error as exc:
        raise click.ClickException(f"cannot open {path}: {exc}") from None


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
    """The cabinets at a place: name, owner, folders, last change."""
    store = _open_store(state_dir)
    rows: list[dict[str, Any]] = []
    for name in store.names(None, everything=True):
        info = store.info(name)
        if info is None:  # removed since it was listed
            continue
        owner, _, updated = info
        rows.append({"name": name, "owner": owner, "folders": store.folders(name, admin=True),
                     "updated": updated})
    store.close()
    if as_json:
        click.echo(json.dumps({"cabinets": rows}))
        return
    if not rows:
        click.echo("(no cabinets)")
        return
    from ..display import table

    table(("CABINET", "OWNER", "FOLDERS", "CHANGED"), [(
        row["name"], f"private to {row['owner']}" if row["owner"] else "public",
        len(row["folders"]),
        time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(row["updated"])),
    ) for row in rows], right=("FOLDERS",))


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
@state_dir_option()
def cabinet_put(name: str, folders: tuple[str, ...], replace: bool,
                state_dir: Path | None) -> None:
    """Write folders into cabinet NAME (created, public, if it does not exist)."""
    data: dict[str, list[bytes]] = {}
    for value in folders:
        folder, element = parse_folder_arg(value)
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
@state_dir_option()
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
