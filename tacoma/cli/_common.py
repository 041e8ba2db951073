"""What the commands share: exit statuses, briefcases in (folder arguments) and out.

Every command that fails for a reason tacoma names ends through `fail`, so a failure looks
the same whichever command met it: one line on stderr, the detail after it, one exit status
per kind of failure (EXIT_CODES). Briefcases are read from `-f NAME=TEXT|NAME=@PATH`
arguments and printed either for a person (`print_briefcase`) or as one JSON object
(`briefcase_json`), by meet, send and cabinet show alike.
"""

from __future__ import annotations

import base64
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

import tacoma

from ..place._settings import default_state_dir
from ..wire._briefcase import CODE_NAME, check_folder_name

__all__ = [
    "EXIT_CODES",
    "FOLDER_HELP",
    "FOLDER_METAVAR",
    "SHOWN_LINES",
    "CommandFunction",
    "briefcase_from",
    "briefcase_json",
    "exit_code",
    "fail",
    "parse_folder_arg",
    "print_briefcase",
    "state_dir_option",
]

#: A command function, as option decorators take and give it.
CommandFunction = TypeVar("CommandFunction", bound=Callable[..., Any])

#: Exit status per failure, most specific first (checked in order).
EXIT_CODES: list[tuple[type[BaseException], int]] = [
    (tacoma.ConnectError, 3),
    (tacoma.UnknownAgent, 4),
    (tacoma.AgentFailed, 5),
    (tacoma.AgentKilled, 6),
    (tacoma.MeetTimeout, 7),
    (tacoma.LimitExceeded, 9),
    (tacoma.ProtocolError, 8),
    (tacoma.PlaceUnavailable, 10),
    (tacoma.TransportError, 11),
    (tacoma.CabinetError, 12),
    (tacoma.MailboxFull, 13),
    (tacoma.MessageError, 14),
    (tacoma.NotAllowed, 15),
    (tacoma.NotAuthorized, 16),
    (tacoma.TrustError, 17),
    (tacoma.UnknownMeet, 18),
    (tacoma.MeetError, 1),
    (tacoma.TacomaError, 1),
]


def exit_code(exc: BaseException) -> int:
    return next(code for cls, code in EXIT_CODES if isinstance(exc, cls))


def fail(exc: tacoma.TacomaError) -> None:
    """Print a failed meet as one line (plus detail) on stderr and exit with its status."""
    name = type(exc).__name__.lstrip("_")
    if isinstance(exc, tacoma.LimitExceeded):
        name = "LimitExceeded"
    elif isinstance(exc, tacoma.ProtocolError):
        name = "ProtocolError"
    click.echo(f"tacoma: {name}: {exc}", err=True)
    detail = getattr(exc, "detail", "")
    if detail:
        click.echo(detail.rstrip("\n"), err=True)
    sys.exit(exit_code(exc))


def state_dir_option(help_text: str = "The place's state directory."
                     ) -> Callable[[CommandFunction], CommandFunction]:
    """The --state-dir option of the commands that work on a place's state directory."""
    return click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path),
                        default=None, help=f"{help_text} [default: {default_state_dir()}]")


# ---------------------------------------------------------------------------- briefcase in
#: The -f option of meet and send (cabinet put has its own: there it is required).
FOLDER_HELP = "Append TEXT (UTF-8), or the bytes of PATH, to folder NAME. Repeatable."
FOLDER_METAVAR = "NAME=TEXT|NAME=@PATH"


def parse_folder_arg(value: str) -> tuple[str, bytes]:
    """One `-f NAME=TEXT` or `-f NAME=@PATH`: the folder's name and the element's bytes."""
    name, sep, content = value.partition("=")
    if not sep:
        raise click.BadParameter(f"{value!r}: expected NAME=TEXT or NAME=@PATH")
    try:
        check_folder_name(name)
    except (TypeError, ValueError) as exc:
        raise click.BadParameter(str(exc)) from None
    if content.startswith("@"):
        path = Path(content[1:])
        try:
            return name, path.read_bytes()
        except OSError as exc:
            raise click.BadParameter(f"{name}=@{path}: cannot read: {exc.strerror}") from None
    return name, content.encode("utf-8")


def briefcase_from(folders: tuple[str, ...], code_path: Path | None = None) -> tacoma.Briefcase:
    """The briefcase the -f arguments (and a --code file, into CODE) describe."""
    bc = tacoma.Briefcase()
    if code_path is not None:
        bc[tacoma.CODE] = [code_path.read_bytes()]
        bc[CODE_NAME] = [code_path.name.encode()]  # the agent's errors name its file
    for value in folders:
        name, element = parse_folder_arg(value)
        bc.append(name, element)
    return bc


# ---------------------------------------------------------------------------- briefcase out
def _element_json(element: bytes) -> Any:
    try:
        return element.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(element).decode("ascii")}


def briefcase_json(bc: tacoma.Briefcase) -> dict[str, Any]:
    """The --json form: {"folders": {NAME: [str | {"base64": ...}, ...]}}."""
    return {"folders": {name: [_element_json(e) for e in elements]
                        for name, elements in bc.items()}}


def _printable(text: str) -> bool:
    return all(c.isprintable() or c in "\n\t\r" for c in text)


def _describe_element(element: bytes) -> str:
    try:
        text = element.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and _printable(text):
        return text
    preview = element[:16].hex(" ")
    more = " ..." if len(element) > 16 else ""
    return f"<{len(element):,} bytes of binary: {preview}{more}>"


#: Lines of one text element shown before the rest is summarised.
SHOWN_LINES = 20


def print_briefcase(bc: tacoma.Briefcase) -> None:
    """A briefcase as a person reads it: each folder, its element count, its elements.

    The CODE folder is summarised (the caller has the program already) and long text is
    cut after SHOWN_LINES lines; --json shows everything.
    """
    if not bc:
        click.echo("(empty briefcase)")
    for name, elements in bc.items():
        if name == CODE_NAME and tacoma.CODE in bc:
            continue  # told on the CODE folder's line
        count = f"{len(elements)} element" + ("" if len(elements) == 1 else "s")
        click.echo(click.style(name, bold=True) + f" ({count})")
        for element in elements:
            if name == tacoma.CODE:
                named = bc.folder(CODE_NAME)
                source = f" from {named[0].decode('utf-8', 'replace')}" if named else ""
                click.echo(f"  <program, {len(element):,} bytes{source}>")
                continue
            lines = _describe_element(element).splitlines() or [""]
            if len(lines) > SHOWN_LINES:
                lines = [*lines[:SHOWN_LINES], f"... ({len(lines) - SHOWN_LINES} more lines)"]
            click.echo("  " + "\n  ".join(lines))
