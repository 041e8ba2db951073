"""`tacoma advise AGENT@PLACE --code PROGRAM --data DIR|SIZE`: move the code, or the data?

The measurements, the model and the program's contract are tacoma.client._advise's; this is
its command line: the two predictions, which is smaller and why, and with --run the better
way run whole, its time beside the prediction.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import click

import tacoma

from ..wire._text import escape
from ._common import (
    FOLDER_METAVAR,
    ByteSize,
    briefcase_from,
    briefcase_json,
    fail,
    print_briefcase,
)

__all__ = ["advise"]

_SIZE = re.compile(r"^\d+(\.\d+)?\s*([kmgt](i?b)?|b)?$", re.I)


@click.command(short_help="Predict whether moving the code or fetching the data is faster.")
@click.argument("target", metavar="AGENT@PLACE")
@click.option("--code", "code_path", required=True,
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The program: a Python scanning agent (examples/search/search.py's "
                   "contract: it reads $TACOMA_DATA/DIR, honours LIMIT, says SCANNED).")
@click.option("--data", default=".", show_default=True, metavar="DIR|SIZE",
              help="A directory of the place's data directory, or a size (30M) to predict "
                   "for, sampling the whole data directory.")
@click.option("-f", "folders", multiple=True, metavar=FOLDER_METAVAR,
              help="The program's own folders (PATTERN=...), as tacoma meet takes them.")
@click.option("--sample", type=ByteSize(4096), default="2M", show_default=True,
              help="Bytes of the data the program is tried on, at the place and here.")
@click.option("--run", is_flag=True, help="Then run the better way, and print its result "
                                          "and its time beside the prediction.")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object: the measurements, predictions and choice.")
def advise(target: str, code_path: Path, data: str, folders: tuple[str, ...], sample: int,
           run: bool, as_json: bool) -> None:
    """Predict the time of moving PROGRAM to the data at PLACE and of fetching the data to
    run it here, from costs measured now: the meet's overhead and the bandwidth to the
    place, its load (tacoma status), and the program's cost per byte in a trial on a
    sample, there and here. Says which is smaller and why.

    \b
    Examples:
      tacoma advise ag_python@127.0.0.1:7707 --code examples/search/search.py \\
          -f PATTERN="mobile agents meet" -f ERRORS=1
      tacoma advise ag_python@HOST:7707 --code scan.py --data logs --run
    """
    from ..client import _advise

    program = code_path.read_text()
    extra = briefcase_from(folders)
    amount: str | int = data
    if _SIZE.match(data.strip()):
        amount = ByteSize().convert(data, None, None)
    click.echo(f"tacoma advise: measuring {target} (a few meets and a trial on "
               f"{sample / 1e6:.1f} MB)", err=True)
    try:
        advice = _advise.advise(target, program, amount, sample=sample, extra=extra)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    except tacoma.TacomaError as exc:
        fail(exc, place=target.rpartition("@")[2])
    outcome = None
    if run:
        click.echo(f"tacoma advise: running the better way ({advice.better})", err=True)
        try:
            result, seconds = advice.run()
        except tacoma.TacomaError as exc:
            fail(exc, place=target.rpartition("@")[2])
        outcome = (result, seconds)
    if as_json:
        out = {"target": advice.target, "directory": advice.directory,
               "data_bytes": advice.data_bytes, "code_bytes": advice.code_bytes,
               "overhead_s": advice.overhead_s, "bandwidth": advice.bandwidth,
               "place_per_byte": advice.place_per_byte, "here_per_byte": advice.here_per_byte,
               "load": advice.load, "cpus": advice.cpus, "agent_cpus": advice.agent_cpus,
               "move_s": advice.move_s, "fetch_s": advice.fetch_s, "better": advice.better,
               "why": advice.why(), "notes": advice.notes}
        if outcome is not None:
            out["ran_s"] = outcome[1]
            out["result"] = briefcase_json(outcome[0])
        click.echo(json.dumps(out, indent=2))
        return
    click.echo(escape(advice.summary(), newlines=True))  # its notes quote the place
    if outcome is not None:
        result, seconds = outcome
        predicted = advice.move_s if advice.better == "move" else advice.fetch_s
        click.echo(f"ran: {seconds:.2f} s (predicted {predicted:.2f} s)")
        print_briefcase(result)
