"""`tacoma cabinet`: a place's cabinets for its administrator, read from its database.

No meet and no running place is needed: the commands open the place's SQLite database (the
cabinet `Store` the place itself uses) with administrator rights, so private cabinets are
shown and changeable too, and `claim` names the principal of a private cabinet made before
cabinets belonged to a principal. A running place sees the changes at once. What the
database holds was written by agents: names and owners are printed escaped.

A name may be several cabinets (a public one, and private ones of different owners, each a
program run for a principal): `list` shows each with its owner, and the others act on the
one cabinet of that name, or the one that --public, --principal and --program pick out; a
name they leave ambiguous is refused with the candidates, never guessed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

import tacoma

from ..place._settings import default_state_dir
from ..wire._text import escape, shown
from ._common import briefcase_json, parse_folder_arg, print_briefcase, state_dir_option

if TYPE_CHECKING:
    from ..place.stores._cabinets import Cabinet, Store

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

    from ..place.stores._cabinets import Store

    path = (state_dir or default_state_dir()) / "cabinets.sqlite3"
    if not path.exists():
        raise click.UsageError(f"no cabinets at {path.parent} (no place has run there)")
    try:
        return Store(path)
    except (sqlite3.Error, tacoma.TacomaError) as exc:
        raise click.ClickException(f"cannot open {path}: {exc}") from None


F = TypeVar("F", bound=Callable[..., Any])


def _which_options(command: F) -> F:
    """--public, --principal and --program: which of the cabinets of a name."""
    for option in (
        click.option("--program", metavar="PROGRAM", default=None,
                     help="The cabinet of that name private to PROGRAM (code:SHA256 or "
                          "agent:NAME, as list shows it)."),
        click.option("--principal", metavar="NAME", default=None,
                     help="The cabinet of that name private to principal NAME."),
        click.option("--public", is_flag=True, help="The public cabinet of that name."),
    ):
        command = option(command)
    return command


def _described(public: bool, principal: str | None, program: str | None) -> str:
    """What --public, --principal and --program asked for, as words after a name."""
    if public:
        return " (public)"
    words = [*([f"private to {escape(program)}"] if program is not None else []),
             *([f"for {shown(principal)}"] if principal is not None else [])]
    return f" ({' '.join(words)})" if words else ""


def _pick(store: Store, name: str, public: bool, principal: str | None,
          program: str | None) -> Cabinet | None:
    """The one cabinet named `name` that the options pick out; None if none is."""
    if public and (principal is not None or program is not None):
        raise click.UsageError("--public with --principal or --program: a public cabinet "
                               "has no owner; give --public or the others")
    found = [c for c in store.cabinets(name)
             if (not public or c.program is None)
             and (principal is None or c.principal == principal)
             and (program is None or c.program == program)]
    if len(found) > 1:
        raise click.UsageError(
            f"{len(found)} cabinets are named {name!r}{_described(public, principal, program)}"
            f": {'; '.join(c.owner for c in found)}; pick one with --public, --principal NAME "
            f"or --program PROGRAM")
    return found[0] if found else None


def _missing(name: str, public: bool, principal: str | None,
             program: str | None) -> click.UsageError:
    return click.UsageError(f"no cabinet {name!r}{_described(public, principal, program)} at "
                            f"this place (tacoma cabinet list shows them)")


def _checked(name: str, what: str = "cabinet") -> str:
    from ..place.stores._cabinets import check_name

    try:
        return check_name(name, what)
    except tacoma.TacomaError as exc:
        raise click.BadParameter(str(exc)) from None


@cabinet.command("list")
@state_dir_option()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def cabinet_list(state_dir: Path | None, as_json: bool) -> None:
    """The cabinets at a place: name, owner (program and principal), folders, last change.

    Cabinets of one name (a public one, private ones of different owners) are listed one
    after the other, each with its owner."""
    store = _open_store(state_dir)
    rows: list[dict[str, Any]] = []
    owners: list[str] = []
    try:
        for info in store.cabinets():
            rows.append({"name": info.name, "owner": info.program,
                         "principal": info.principal, "folders": store.folders(info, None),
                         "updated": info.updated})
            owners.append(info.owner)
    finally:
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
@_which_options
@state_dir_option()
@click.option("--json", "as_json", is_flag=True,
              help='Print one JSON object: {"folders": {NAME: [ELEMENT, ...]}}.')
def cabinet_show(name: str, folders: tuple[str, ...], public: bool, principal: str | None,
                 program: str | None, state_dir: Path | None, as_json: bool) -> None:
    """Print a cabinet's folders (all, or the FOLDERS named)."""
    store = _open_store(state_dir)
    bc = tacoma.Briefcase()
    try:
        chosen = _pick(store, _checked(name), public, principal, program)
        if chosen is None:
            raise _missing(name, public, principal, program)
        for folder in folders or store.folders(chosen, None):
            bc.replace(folder, store.read(chosen, folder, None))
    finally:
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
@_which_options
@state_dir_option()
def cabinet_put(name: str, folders: tuple[str, ...], replace: bool, public: bool,
                principal: str | None, program: str | None, state_dir: Path | None) -> None:
    """Write folders into cabinet NAME (created, public, if there is none of that name)."""
    data: dict[str, list[bytes]] = {}
    for value in folders:
        folder, element = parse_folder_arg(value)
        data.setdefault(_checked(folder, "folder"), []).append(element)
    store = _open_store(state_dir)
    try:
        chosen = _pick(store, _checked(name), public, principal, program)
        if chosen is None and (principal is not None or program is not None):
            raise click.UsageError(
                f"no cabinet {name!r}{_described(public, principal, program)} at this place: "
                f"put makes public cabinets only (a private one is made by its owner's agent)")
        store.write(name if chosen is None else chosen, data, replace, None)
    except tacoma.TacomaError as exc:  # the disk is full, or it went: nothing was written
        raise click.ClickException(str(exc)) from None
    finally:
        store.close()
    count = sum(len(v) for v in data.values())
    whose = "" if chosen is None or chosen.program is None else f" ({chosen.owner})"
    click.echo(f"{'replaced' if replace else 'appended'} {count} element"
               f"{'' if count == 1 else 's'} in cabinet {name}{whose}")


@cabinet.command("rm")
@click.argument("name")
@click.argument("folders", nargs=-1)
@_which_options
@state_dir_option()
def cabinet_rm(name: str, folders: tuple[str, ...], public: bool, principal: str | None,
               program: str | None, state_dir: Path | None) -> None:
    """Remove cabinet NAME, or only the FOLDERS named."""
    store = _open_store(state_dir)
    try:
        chosen = _pick(store, _checked(name), public, principal, program)
        if chosen is None:
            raise _missing(name, public, principal, program)
        store.remove(chosen, list(folders) or None, None)
    except tacoma.TacomaError as exc:  # the disk is full: nothing was removed
        raise click.ClickException(str(exc)) from None
    finally:
        store.close()
    whose = "" if chosen.program is None else f" ({chosen.owner})"
    click.echo(f"removed {'folders ' + ', '.join(folders) + ' of ' if folders else ''}"
               f"cabinet {name}{whose}")


@cabinet.command("claim")
@click.argument("name")
@click.option("--principal", required=True, metavar="NAME",
              help="The identity the cabinet belongs to, with the program that made it "
                   "(\"\" on an --insecure place, where nobody is authenticated).")
@click.option("--program", metavar="PROGRAM", default=None,
              help="Of the private cabinets of that name, the one of PROGRAM.")
@click.option("--was", metavar="NAME", default=None,
              help="Of the private cabinets of that name, the one private to principal NAME "
                   "now (to give it to another).")
@state_dir_option()
def cabinet_claim(name: str, principal: str, program: str | None, was: str | None,
                  state_dir: Path | None) -> None:
    """Name the principal a private cabinet belongs to.

    A private cabinet belongs to a principal and a program together: the program that
    made it, run for that principal. A private cabinet kept by an older tacoma names only
    its program, and no agent may use it until its principal is named here; then that
    program, run for that principal, may. Of the private cabinets of NAME, claim takes the
    one waiting for a principal; with none waiting, the one --program and --was pick out,
    to give it to another principal instead. Run it where the place's state directory is
    (the place may be running).

    \b
    Examples:
      tacoma cabinet list                        # the cabinets, with their owners
      tacoma cabinet claim visits --principal alice
      tacoma cabinet claim visits --principal bob --was alice --program 3f9a...
    """
    from ..place.stores._cabinets import check_name

    if escape(principal) != principal:
        raise click.BadParameter(f"{shown(principal)} has characters no identity's name has",
                                 param_hint="--principal")
    store = _open_store(state_dir)
    try:
        found = store.cabinets(check_name(name))
        if not found:
            raise click.UsageError(f"no cabinet {name!r} at this place")
        private = [c for c in found if c.program is not None
                   and (program is None or c.program == program)
                   and (was is None or c.principal == was)]
        if not private and all(c.program is None for c in found):
            raise click.UsageError(f"cabinet {name!r} is public: any agent may use it, so it "
                                   f"has no owner to name")
        waiting = [c for c in private if c.unclaimed]
        chosen = waiting[0] if len(waiting) == 1 else private[0] if len(private) == 1 \
            else None
        if chosen is None:
            asked = _described(False, was, program)
            raise click.UsageError(
                f"no private cabinet {name!r}{asked} at this place" if not private else
                f"{len(private)} private cabinets are named {name!r}{asked}: "
                f"{'; '.join(c.owner for c in private)}; pick one with --program PROGRAM and "
                f"--was NAME")
        store.claim(chosen, principal)
    except tacoma.CabinetError as exc:
        raise click.UsageError(str(exc)) from None
    except tacoma.TacomaError as exc:  # the disk is full: nothing was written
        raise click.ClickException(str(exc)) from None
    finally:
        store.close()
    assert chosen.program is not None  # only private cabinets are chosen
    before = "" if chosen.principal is None else f" (was {shown(chosen.principal)})"
    click.echo(f"cabinet {name} is private to {escape(chosen.program)} for {shown(principal)}"
               f"{before}")
