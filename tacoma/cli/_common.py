"""What the commands share: errors, sizes and durations, the default place, briefcases.

Every failure, whichever command met it, ends here and looks the same: one line on stderr,
`tacoma: KIND: message`, the detail after it (an agent's traceback, the place's list of
agents), then a `hint:` line where the fix is known; under --json also exactly one JSON
object on stdout, `{"error": {"kind", "message", "detail", "hint", "exit_status"}}`; and
one exit status per kind of failure (EXIT_CODES). `fail` does it for tacoma's errors,
`report` for the rest (usage errors, an interrupt: see _main).

What an agent or a place says is theirs to choose, escape sequences included (a title
change, a clipboard write, a cleared screen): everything printed here for a person goes
through wire._text.escape, the message on its one line, a traceback with its newlines.
JSON needs nothing more: json.dumps writes every control character as an escape, and the
data stays exact.

Sizes (`2G`, `256M`) and durations (`30s`, `5m`) are click parameter types, so that every
option that takes one reads it alike and a bad value is a usage error naming the option.
The default place of meet, send, ps, kill and status is one: `$TACOMA_PLACE`, else
127.0.0.1:7707 (`default_place`). Briefcases are read from `-f NAME=TEXT|NAME=@PATH`
arguments and printed for a person (`print_briefcase`) or as JSON (`briefcase_json`). A
lazy folder in a result is printed as its reference (size, elements, origin), never
fetched: printing must not connect anywhere, least of all to an origin a place named.
"""

from __future__ import annotations

import base64
import json
import math
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

import tacoma

from ..place._settings import DEFAULT_LISTEN, default_state_dir
from ..wire._address import parse_address, split_target
from ..wire._briefcase import CODE_NAME, RESERVED_FOLDERS, check_folder_name
from ..wire._lazy import Ref
from ..wire._text import escape

__all__ = [
    "EXIT_CODES",
    "FOLDER_HELP",
    "FOLDER_METAVAR",
    "INTERRUPTED_STATUS",
    "PLACE_ENV",
    "SHOWN_ELEMENTS",
    "SHOWN_LINES",
    "USAGE_STATUS",
    "ByteSize",
    "CommandFunction",
    "Duration",
    "briefcase_from",
    "briefcase_json",
    "default_place",
    "error_kind",
    "exit_code",
    "fail",
    "format_duration",
    "format_size",
    "json_requested",
    "parse_folder_arg",
    "print_briefcase",
    "report",
    "state_dir_option",
    "with_place",
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
    (tacoma.LazyFolderError, 19),
    (tacoma.MeetError, 1),
    (tacoma.TacomaError, 1),
]

#: Usage errors (click's, and ours: a bad option, argument or target).
USAGE_STATUS = 2
#: An interrupt (Ctrl-C): 128 + SIGINT, as shells report a process killed by it.
INTERRUPTED_STATUS = 130

#: The environment variable naming the default place (HOST:PORT).
PLACE_ENV = "TACOMA_PLACE"


def exit_code(exc: BaseException) -> int:
    return next(code for cls, code in EXIT_CODES if isinstance(exc, cls))


def error_kind(exc: BaseException) -> str:
    """The KIND of `tacoma: KIND: message`: the error's public class name."""
    if isinstance(exc, tacoma.LimitExceeded):
        return "LimitExceeded"  # the place's _RemoteLimitExceeded is a LimitExceeded
    if isinstance(exc, tacoma.ProtocolError):
        return "ProtocolError"
    return type(exc).__name__.lstrip("_")


def json_requested() -> bool:
    """Whether the command running now was given --json (its own, or a parent's)."""
    ctx = click.get_current_context(silent=True)
    while ctx is not None:
        if ctx.params.get("as_json"):
            return True
        ctx = ctx.parent
    return False


def report(kind: str, message: str, *, detail: str = "", hint: str = "", status: int,
           hint_label: str = "hint: ", as_json: bool | None = None,
           exit_now: bool = True) -> None:
    """Print one failure in the one format (and as JSON on stdout under --json); exit with
    `status` unless `exit_now` is false. None for `as_json`: as the running command's
    --json says."""
    if as_json is None:
        as_json = json_requested()
    if as_json:
        click.echo(json.dumps({"error": {"kind": kind, "message": message, "detail": detail,
                                         "hint": hint, "exit_status": status}}))
    # The message is one line: a newline in it could print a line that looks like ours.
    click.echo(f"tacoma: {escape(kind)}: {escape(message)}", err=True)
    if detail:
        click.echo(escape(detail.rstrip("\n"), newlines=True), err=True)
    if hint:
        click.echo(f"{hint_label}{escape(hint, newlines=True)}", err=True)
    if exit_now:
        sys.exit(status)


def fail(exc: tacoma.TacomaError, *, place: str | None = None,
         as_json: bool | None = None) -> NoReturn:
    """Report a tacoma error (with a hint where the fix is known) and exit with its status.

    `place`: the address the command was talking to, for the hint on a refused connection.
    """
    report(error_kind(exc), str(exc), detail=getattr(exc, "detail", ""),
           hint=hint_for(exc, place), status=exit_code(exc), as_json=as_json)
    raise AssertionError("not reached: report exits")


def hint_for(exc: tacoma.TacomaError, place: str | None) -> str:
    """What to do next, for the failures whose fix is known ("" for the others)."""
    if isinstance(exc, tacoma.ConnectError) and "refused" in str(exc).lower() and place:
        default = "" if os.environ.get(PLACE_ENV) else (
            f" (or name another place, or set ${PLACE_ENV})"
            if place == DEFAULT_LISTEN else "")
        return (f"no place listens at {place}; start one with "
                f"`tacoma place --listen {place}`{default}")
    if isinstance(exc, tacoma.LimitExceeded) and not any(
            word in str(exc) for word in ("--share", "-bytes", "disk", "could not be reached")):
        # A frame too large (the shares and the disk's refusals say what to do themselves).
        return ("a place takes briefcases up to its --max-briefcase (64M unless it was "
                "started with another): send less, or start the place with a larger one, "
                "e.g. `tacoma place --max-briefcase 256M`")
    return ""


def state_dir_option(help_text: str = "The place's state directory."
                     ) -> Callable[[CommandFunction], CommandFunction]:
    """The --state-dir option of the commands that work on a place's state directory
    (its default, `default_state_dir()`, is $TACOMA_STATE_DIR if set)."""
    return click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path),
                        default=None, help=f"{help_text} [default: $TACOMA_STATE_DIR, or "
                        f"{default_state_dir()}]")


# ---------------------------------------------------------------------------- places
def default_place() -> str:
    """The place meet, send, ps, kill and status talk to when none is named:
    $TACOMA_PLACE, else 127.0.0.1:7707. A malformed $TACOMA_PLACE is a usage error."""
    chosen = os.environ.get(PLACE_ENV, "").strip()
    if not chosen:
        return DEFAULT_LISTEN
    try:
        parse_address(chosen)
    except ValueError as exc:
        raise click.UsageError(f"${PLACE_ENV}: {exc}") from None
    return chosen


def with_place(target: str, what: str = "AGENT", param_hint: str = "AGENT[@PLACE]") -> str:
    """`NAME@PLACE` as given, or NAME at the default place; a usage error for a target that
    is not NAME@HOST:PORT or NAME, or is a place given where a NAME belongs."""
    try:
        name, place = split_target(target)
    except ValueError:
        raise click.BadParameter(f"{target!r}: expected {what}@HOST:PORT or {what}",
                                 param_hint=param_hint) from None
    if place is None and _is_address(name):
        example = f" (e.g. ag_echo@{name})" if what == "AGENT" else ""
        raise click.BadParameter(
            f"{name} is a place, not {'an agent' if what == 'AGENT' else 'a name'}: "
            f"write {what}@{name}{example}", param_hint=param_hint)
    if place is not None:
        try:
            parse_address(place)
        except ValueError as exc:
            raise click.BadParameter(f"{target!r}: {exc}", param_hint=param_hint) from None
        return target
    return f"{name}@{default_place()}"


def _is_address(text: str) -> bool:
    try:
        parse_address(text)
    except ValueError:
        return False
    return True


# ---------------------------------------------------------------------------- sizes, times
_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
_SIZE = re.compile(r"(?P<number>\d+(?:\.\d*)?|\.\d+)\s*(?P<unit>[kmgt]?)(?:i?b)?", re.I)
_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h|d)?", re.I)


def format_size(size: int) -> str:
    """A byte count as an option takes it: the largest unit it is a whole number of."""
    for unit in "TGMK":
        scale = _UNITS[unit.lower()]
        if size >= scale and size % scale == 0:
            return f"{size // scale}{unit}"
    return str(size)


def format_duration(seconds: float) -> str:
    """Seconds as an option takes them: 300 -> 5m, 86400 -> 1d, 2.5 -> 2.5s."""
    for unit in ("d", "h", "m"):
        scale = _SECONDS[unit]
        if seconds >= scale and seconds % scale == 0:
            return f"{int(seconds // scale)}{unit}"
    return f"{seconds:g}s"


if TYPE_CHECKING:
    _SizeType = click.ParamType[int]
    _DurationType = click.ParamType[float]
else:  # click before 8.2 (setup.cfg allows 8.1): ParamType takes no type argument
    _SizeType = _DurationType = click.ParamType


class ByteSize(_SizeType):
    """A size in bytes: 4096, 64k, 256M, 2G, 1.5GiB (K, M, G, T: powers of 1024)."""

    name = "size"

    def __init__(self, minimum: int = 0) -> None:
        self.minimum = minimum

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "SIZE"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            size = value
        else:
            match = _SIZE.fullmatch(str(value).strip())
            if match is None:
                self.fail(f"{value!r} is not a size: give bytes, or a number with K, M, G or "
                          "T (powers of 1024), e.g. 256M or 2G", param, ctx)
            size = math.floor(float(match["number"]) * _UNITS[match["unit"].lower()])
        if size < self.minimum:
            self.fail(f"{value} is less than the least allowed, {format_size(self.minimum)}",
                      param, ctx)
        return size


class Duration(_DurationType):
    """A duration in seconds: 30, 30s, 500ms, 5m, 2h, 1d, 1h30m."""

    name = "duration"

    def __init__(self, minimum: float = 0.0, *, positive: bool = False,
                 whole: bool = False) -> None:
        self.minimum = minimum
        self.positive = positive  # more than `minimum`, not equal to it
        self.whole = whole  # a whole number of seconds

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "DURATION"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> float | int:
        if isinstance(value, int | float) and not isinstance(value, bool):
            seconds = float(value)
        else:
            text = str(value).strip()
            parts = list(_DURATION.finditer(text))
            if not text or "".join(p.group(0) for p in parts).replace(" ", "") \
                    != text.replace(" ", ""):
                self.fail(f"{value!r} is not a duration: give seconds, or a number with ms, "
                          "s, m, h or d, e.g. 30s, 5m, 2h", param, ctx)
            seconds = sum(float(p[1]) * _SECONDS[(p[2] or "s").lower()] for p in parts)
        if not math.isfinite(seconds) or seconds < self.minimum or (
                self.positive and seconds == self.minimum):
            bound = "more than" if self.positive else "at least"
            self.fail(f"{value} is not {bound} {format_duration(self.minimum)}", param, ctx)
        if self.whole:
            if seconds != int(seconds):
                self.fail(f"{value} is not a whole number of seconds", param, ctx)
            return int(seconds)
        return seconds


# ---------------------------------------------------------------------------- briefcase in
#: The -f option of meet and send (cabinet put has its own: there it is required).
FOLDER_HELP = ("Append TEXT (UTF-8), or the bytes of PATH, to folder NAME; NAME=@@PATH sends "
               "the file by reference (a lazy folder: the agent fetches what it reads). "
               "Repeatable.")
FOLDER_METAVAR = "NAME=TEXT|NAME=@PATH|NAME=@@PATH"


def parse_folder_arg(value: str) -> tuple[str, bytes]:
    """One `-f NAME=TEXT` or `-f NAME=@PATH`: the folder's name and the element's bytes."""
    name, sep, content = value.partition("=")
    if not sep:
        raise click.BadParameter(f"{value!r}: expected NAME=TEXT or NAME=@PATH",
                                 param_hint="'-f'")
    try:
        check_folder_name(name)
    except (TypeError, ValueError) as exc:
        raise click.BadParameter(str(exc), param_hint="'-f'") from None
    if content.startswith("@"):
        path = Path(content[1:])
        try:
            return name, path.read_bytes()
        except OSError as exc:
            raise click.BadParameter(f"{name}=@{path}: cannot read: {exc.strerror}",
                                     param_hint="'-f'") from None
    return name, content.encode("utf-8")


def briefcase_from(folders: tuple[str, ...], code_path: Path | None = None) -> tacoma.Briefcase:
    """The briefcase the -f arguments describe, and a --code file's program in CODE with
    its base name in CODE_NAME (so that the agent's errors name its file)."""
    bc = tacoma.Briefcase()
    if code_path is not None:
        try:
            bc[tacoma.CODE] = [code_path.read_bytes()]
        except OSError as exc:
            raise click.BadParameter(f"{code_path}: cannot read: {exc.strerror or exc}",
                                     param_hint="--code") from None
        bc[CODE_NAME] = [code_path.name.encode()]  # the agent's errors name its file
    for value in folders:
        name, _, content = value.partition("=")
        if content.startswith("@@"):  # a lazy folder: the file's one element, by reference
            check_folder_name_arg(name)
            if name in RESERVED_FOLDERS:
                raise click.BadParameter(f"{value}: folder {name} cannot be lazy: the system "
                                         "reads it", param_hint="'-f'")
            if name in bc:
                raise click.BadParameter(f"{value}: a lazy folder holds one element, the "
                                         "file; give the folder no other -f", param_hint="'-f'")
            try:
                bc[name] = tacoma.lazy(content[2:])
            except OSError as exc:
                raise click.BadParameter(f"{value}: {exc}", param_hint="'-f'") from None
            continue
        name, element = parse_folder_arg(value)
        if bc.is_lazy(name):
            raise click.BadParameter(f"{value}: folder {name} is lazy (@@), and holds only "
                                     "its file", param_hint="'-f'")
        bc.append(name, element)
    return bc


def check_folder_name_arg(name: str) -> None:
    try:
        check_folder_name(name)
    except (TypeError, ValueError) as exc:
        raise click.BadParameter(str(exc), param_hint="'-f'") from None


# ---------------------------------------------------------------------------- briefcase out
def _element_json(element: bytes) -> Any:
    try:
        return element.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(element).decode("ascii")}


def _lazy_refs(bc: tacoma.Briefcase) -> dict[str, Ref]:
    """The references of `bc`'s lazy folders, by folder name (asking fetches nothing)."""
    return {ref.name: ref for ref in bc.lazy_refs()}


def _lazy_json(ref: Ref) -> dict[str, Any]:
    return {"lazy": {"size": ref.size, "count": ref.count, "origin": ref.origin}}


def briefcase_json(bc: tacoma.Briefcase) -> dict[str, Any]:
    """The --json form: {"folders": {NAME: [str | {"base64": ...}, ...]}}; a lazy folder,
    not fetched, as {"lazy": {"size": BYTES, "count": ELEMENTS, "origin": HOST:PORT}}."""
    refs = _lazy_refs(bc)
    return {"folders": {name: _lazy_json(refs[name]) if name in refs
                        else [_element_json(e) for e in bc[name]] for name in bc}}


#: Lines of one text element shown before the rest is summarised.
SHOWN_LINES = 20
#: Elements of a folder printed (a search's thousand matches would fill the screen).
SHOWN_ELEMENTS = 20


def _element_lines(element: bytes) -> list[str]:
    """An element as a person reads it: its text's lines, cut after SHOWN_LINES, each with
    its control characters escaped (only the lines shown are looked at: an element may be
    megabytes); or, if it is not UTF-8 or holds a NUL (git's test for binary), its size and
    first bytes in hex."""
    try:
        text = element.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is None or "\0" in text:
        preview = element[:16].hex(" ")
        more = " ..." if len(element) > 16 else ""
        return [f"<{len(element):,} bytes of binary: {preview}{more}>"]
    lines = text.removesuffix("\n").split("\n", SHOWN_LINES)
    shown = [escape(line) for line in lines[:SHOWN_LINES]]
    if len(lines) > SHOWN_LINES:  # the last is the rest, unsplit
        shown.append(f"... ({lines[SHOWN_LINES].count(chr(10)) + 1} more lines)")
    return shown


def print_briefcase(bc: tacoma.Briefcase) -> None:
    """A briefcase as a person reads it: each folder, its element count, its elements.

    The CODE folder is summarised (the caller has the program already), a lazy folder is
    its reference, a long folder is cut after SHOWN_ELEMENTS elements and long text after
    SHOWN_LINES lines; --json shows everything.
    Names and text are escaped: they are the agent's, and so is what they would make a
    terminal do.
    """
    if not bc:
        click.echo("(empty briefcase)")
    refs = _lazy_refs(bc)
    for name in bc:
        if name == CODE_NAME and tacoma.CODE in bc:
            continue  # told on the CODE folder's line
        if name in refs:
            ref = refs[name]
            at = f" at {escape(ref.origin)}" if ref.origin else ""
            click.echo(click.style(escape(name), bold=True) + f" ({_elements(ref.count)}, "
                       "lazy)")
            click.echo(f"  <by reference: {ref.size:,} bytes{at}, not fetched>")
            continue
        elements = bc[name]
        click.echo(click.style(escape(name), bold=True) + f" ({_elements(len(elements))})")
        if len(elements) > SHOWN_ELEMENTS:
            hidden = len(elements) - SHOWN_ELEMENTS
            elements = elements[:SHOWN_ELEMENTS]
        else:
            hidden = 0
        for element in elements:
            if name == tacoma.CODE:
                named = bc.folder(CODE_NAME)
                source = (f" from {escape(named[0].decode('utf-8', 'replace'))}"
                          if named else "")
                click.echo(f"  <program, {len(element):,} bytes{source}>")
                continue
            click.echo("  " + "\n  ".join(_element_lines(element)))
        if hidden:
            click.echo(f"  ... ({hidden:,} more element{'s' * (hidden != 1)}; --json shows "
                       "them all)")


def _elements(count: int) -> str:
    return f"{count:,} element" + ("" if count == 1 else "s")
