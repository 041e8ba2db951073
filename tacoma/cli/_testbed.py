"""`tacoma testbed`: separate hosts on this machine (see tacoma.testbed), kept up between
commands.

    up        make a testbed (network namespaces h1..hN on a bridge) and leave it up
    down      remove the testbed `up` made
    status    the recorded testbed: each host's namespace, address, and whether it is cut

A `Testbed` removes itself when its program ends; this one outlives `up`, so `up` records
what it made (`Testbed.record()`, as JSON in the user's cache directory, or --record) and
`down` rebuilds the testbed from that record to remove it. Its tag is `up` and the pid of
`up`, which `Testbed.cleanup_stale` (made for the tests' testbeds, tagged with a live pid)
never takes for a leftover.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ._common import fail

if TYPE_CHECKING:
    from ..testbed import Testbed

__all__ = ["testbed"]

#: The port the printed examples start places on (any free port will do).
EXAMPLE_PORT = 7707


def _default_record() -> Path:
    import platformdirs

    return Path(platformdirs.user_cache_dir("tacoma", appauthor=False)) / "testbed.json"


def _read(path: Path) -> dict[str, Any] | None:
    """The record at `path`, None if there is none."""
    from ..testbed import TestbedError

    try:
        record: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        fail(TestbedError(f"cannot read the testbed record {path}: {exc}; remove it, and "
                          "the namespaces it names (ip netns list), by hand"))
    return record


def _write(path: Path, record: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(record, indent=2) + "\n")
    partial.replace(path)


def _record_option(command: Any) -> Any:
    """--record, taken after the subcommand too (`tacoma testbed up --record F`) as well as
    before it (`tacoma testbed --record F up`): a newcomer types it either way."""
    return click.option(
        "--record", "record_path", type=click.Path(dir_okay=False, path_type=Path),
        default=None, help="The file where `up` records what it made, for `down` and "
        "`status` (also accepted before the subcommand). [default: testbed.json in the "
        "user's cache directory]")(command)


def _chosen(ctx: click.Context, record_path: Path | None) -> Path:
    """The record file: the subcommand's --record, else the group's, else the default."""
    return record_path or ctx.obj or _default_record()


def _again(command: str, record_path: Path) -> str:
    """`tacoma testbed COMMAND`, with the --record it needs to find this record."""
    extra = "" if record_path == _default_record() else f" --record {record_path}"
    return f"tacoma testbed {command}{extra}"


def _rebuilt(record: dict[str, Any]) -> Testbed:
    from ..testbed import Testbed

    return Testbed.from_record(record)


@click.group(short_help="Separate hosts on this machine, for tests.")
@click.option("--record", "record_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None,
              help="The file where `up` records what it made, for `down` and `status`. "
                   "[default: testbed.json in the user's cache directory]")
@click.pass_context
def testbed(ctx: click.Context, record_path: Path | None) -> None:
    """Separate hosts on this machine: network namespaces on a bridge (root).

    Each host is a network namespace with its own address on a private /24; this machine
    reaches them all. Start a place in one with `nsenter --net=/var/run/netns/NAMESPACE
    tacoma place --listen ADDRESS:PORT ...`, as `up` shows. The Python API is
    tacoma.testbed.Testbed, which also cuts hosts off and makes their links lossy.
    """
    ctx.obj = record_path


@testbed.command()
@click.option("--hosts", type=click.IntRange(1, 253), default=4, show_default=True,
              help="How many hosts (h1, h2, ...).")
@_record_option
@click.pass_context
def up(ctx: click.Context, hosts: int, record_path: Path | None) -> None:
    """Make a testbed of HOSTS hosts and leave it up (until `tacoma testbed down`)."""
    from ..testbed import Testbed, TestbedError

    record_path = _chosen(ctx, record_path)
    record = _read(record_path)
    if record is not None and _rebuilt(record).leftovers():
        fail(TestbedError(
            f"a testbed is up already ({record['subnet']}, recorded in {record_path}): "
            f"`{_again('down', record_path)}` removes it; `{_again('status', record_path)}` "
            "shows it"))
    bed = Testbed(hosts, tag=f"up{os.getpid()}")
    try:
        bed.up()
        _write(record_path, bed.record())
    except TestbedError as exc:
        bed.close()
        fail(exc)
    except OSError as exc:
        bed.close()
        fail(TestbedError(f"cannot write the testbed record {record_path}: "
                          f"{exc.strerror or exc}; removed the testbed again"))
    click.echo(f"testbed up: {hosts} hosts on {bed.subnet}; this machine is "
               f"{bed.client_address} on {bed.client_link}")
    for host in bed.hosts:
        click.echo(f"  {host:<4} {bed.address(host):<15} namespace {bed.namespace(host)}")
    first = bed.hosts[0]
    enter = " ".join(bed.prefix(first))
    where = f"{bed.address(first)}:{EXAMPLE_PORT}"
    click.echo(f"\nstart a place in {first} (a closed test network: no TLS):\n"
               f"  {enter} tacoma place --listen {where} --insecure\n"
               f"  tacoma meet ag_echo@{where} --insecure\n"
               f"or with an identity naming its address:\n"
               f"  tacoma trust issue place-{first} --place --address {bed.address(first)}\n"
               f"  {enter} tacoma place --listen {where} --identity place-{first}\n"
               f"  tacoma meet ag_echo@{where}\n"
               f"\ntake it down with: {_again('down', record_path)}")


@testbed.command()
@_record_option
@click.pass_context
def down(ctx: click.Context, record_path: Path | None) -> None:
    """Remove the testbed `up` made (its namespaces, bridge and link)."""
    from ..testbed import TestbedError

    record_path = _chosen(ctx, record_path)
    record = _read(record_path)
    if record is None:
        click.echo(f"no testbed is recorded in {record_path}: nothing to remove")
        return
    try:
        _rebuilt(record).close()
    except TestbedError as exc:
        fail(exc)
    record_path.unlink(missing_ok=True)
    click.echo(f"removed the testbed on {record['subnet']}")


@testbed.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@_record_option
@click.pass_context
def status(ctx: click.Context, as_json: bool, record_path: Path | None) -> None:
    """The testbed `up` made: each host's namespace, address and state (up, cut, gone)."""
    from ..testbed import TestbedError

    record_path = _chosen(ctx, record_path)
    record = _read(record_path)
    if record is None:
        if as_json:
            click.echo(json.dumps({"record": str(record_path), "testbed": None}))
        else:
            click.echo(f"no testbed is recorded in {record_path}: "
                       f"`{_again('up', record_path)}` makes one")
        return
    bed = _rebuilt(record)
    present = set(bed.leftovers())
    states = {}
    try:
        for host in bed.hosts:
            if {bed.namespace(host), bed.bridge_namespace} - present:
                states[host] = "gone"
            else:
                states[host] = "cut" if bed.is_cut(host) else "up"
    except TestbedError as exc:
        fail(exc)
    if as_json:
        click.echo(json.dumps({"record": str(record_path), "testbed": record,
                               "states": states}))
        return
    click.echo(f"testbed on {bed.subnet}; this machine is {bed.client_address} on "
               f"{bed.client_link}" + ("" if bed.client_link in present else " (gone)"))
    for host in bed.hosts:
        click.echo(f"  {host:<4} {bed.address(host):<15} {states[host]:<5} "
                   f"namespace {bed.namespace(host)}")
    if "gone" in states.values():
        click.echo(f"parts of it are gone (a reboot?): `{_again('down', record_path)}` "
                   "forgets it")
