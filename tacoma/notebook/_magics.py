"""The `%%meet` cell magic: the cell's body is an agent's program, met at a place.

    %%meet TARGET [-f NAME[=VAR] ...] [--async] [--itinerary A,B,C] [-o VAR] [--timeout S]

TARGET is what `tacoma.meet` takes (`ag_tcl@HOST:PORT`; a bare agent meets at the embedded
place), so the body is a program in that agent's language: Python for ag_python (it sees
`bc` and the agent API as globals), a Tcl script for ag_tcl, and so on. IPython expands
`{expr}` and `$name` in the line, so `ag_python@{places.addresses[0]}` works.

The line is parsed with IPython's own `magic_arguments` (argparse underneath, as
ipyparallel's `%%px`), so `%%meet?` shows the same help. Notebook variables become folders
(`-f`); the cell's number becomes the CODE_NAME folder, so that an agent's traceback names
`cell[12]`; the result is bound with `-o` or shown as the cell's value. A failed meet fails
the cell with the tacoma error, which IPython shows through its `_render_traceback_`:
the agent's own traceback, not tacoma's frames, escaped (see _views: an agent's message is
the agent's to choose, escape sequences included). An interrupted cell (Kernel >
Interrupt) cancels its meet at the place and says so in one line, as `tacoma meet` does
on Ctrl-C: `Cancelled: meet ... cancelled; the agent was stopped`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from IPython.core import magic_arguments as arguments
from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, magics_class

import tacoma
from tacoma.client._identity import new_meet_id
from tacoma.client._status import cancelled
from tacoma.wire import CODE, CODE_NAME, Briefcase
from tacoma.wire._address import split_target
from tacoma.wire._briefcase import FRESH, ITINERARY
from tacoma.wire._text import escape

from ._views import register, safe_error

__all__ = ["MeetCancelled", "TacomaMagics", "load_ipython_extension"]

# IPython's magic_arguments ships no type information; these are its functions, typed.
Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]
magic_arguments = cast(Callable[[], Decorator], arguments.magic_arguments)
argument = cast(Callable[..., Decorator], arguments.argument)
parse_argstring = cast(Callable[[Callable[..., Any], str], Any], arguments.parse_argstring)

#: The values a notebook variable may hold to become a folder's one element.
_ELEMENT_TYPES = (bytes, bytearray, memoryview, str)


class MeetCancelled(KeyboardInterrupt):
    """A `%%meet` cell interrupted: its meet was cancelled at the place. Still an interrupt
    (the cells queued after it do not run), shown as the one line the CLI prints."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message, self.hint = message, hint

    def _render_traceback_(self) -> list[str]:
        lines = [f"Cancelled: {escape(self.message)}"]
        if self.hint:
            lines.append(f"Hint: {escape(self.hint)}")
        return lines


def folder_elements(spec: str, value: object) -> list[bytes | str]:
    """The elements of the folder `-f spec` asks for, from its variable's `value`: bytes or
    str is one element, a list or tuple of them is the folder's elements."""
    if isinstance(value, _ELEMENT_TYPES):
        return [bytes(value) if not isinstance(value, str) else value]
    if isinstance(value, list | tuple):
        elements: list[bytes | str] = []
        for index, element in enumerate(value):
            if not isinstance(element, _ELEMENT_TYPES):
                raise UsageError(
                    f"-f {spec}: element {index} is a {type(element).__name__}; a folder's "
                    "elements are bytes or str (convert it first, e.g. str(x) or json.dumps(x))")
            elements.append(bytes(element) if not isinstance(element, str) else element)
        return elements
    raise UsageError(f"-f {spec}: the variable holds a {type(value).__name__}; a folder is "
                     "made from bytes or str (one element) or a list or tuple of them "
                     "(convert it first, e.g. str(x) or json.dumps(x))")


def _listed(value: str | None, option: str) -> list[str] | None:
    """A comma-separated option's items (None: not given); UsageError if it names none."""
    if value is None:
        return None
    items = [item.strip() for item in value.split(",") if item.strip()]
    if not items:
        raise UsageError(f"{option}: give the items, comma-separated")
    return items


@magics_class
class TacomaMagics(Magics):
    """tacoma's magics: `%%meet`."""

    @magic_arguments()
    @argument("target", help="AGENT@HOST:PORT, or a bare AGENT (the embedded place); the "
              "cell is a program in that agent's language")
    @argument("-f", "--folder", dest="folders", action="append", default=[],
              metavar="NAME[=VAR]", help="folder NAME from the notebook variable VAR (NAME "
              "alone: the variable NAME): bytes or str is one element, a list or tuple of "
              "them the elements; repeatable")
    @argument("--async", dest="is_async", action="store_true",
              help="return at once with the meet's id (ID@PLACE) instead of its result: "
              "ask for that with tacoma.result, tacoma.status or tacoma.results")
    @argument("--itinerary", metavar="A,B,C",
              help="places the agent visits (the ITINERARY folder), comma-separated")
    @argument("-o", "--output", metavar="VAR",
              help="bind the result briefcase (with --async: the meet id) to the notebook "
              "variable VAR instead of showing it")
    @argument("--timeout", type=float, metavar="SECONDS",
              help="bound on the whole meet; the place kills the agent when it passes")
    @argument("--places", metavar="A,B,C",
              help="the places the agent's passport lets it visit (HOST:PORT or place "
              "names, shell patterns allowed), comma-separated (default: any of the "
              "cluster)")
    @argument("--may", metavar="WHAT,...",
              help="what the passport lets it do for you there, of meet, move, cabinet, "
              "lazy and status, comma-separated (default: all)")
    @argument("--fresh", action="store_true",
              help="run the agent in a fresh worker process, never a warm one that served "
              "the same cell before")
    @cell_magic  # type: ignore[untyped-decorator,unused-ignore]  # untyped in older IPython
    def meet(self, line: str, cell: str) -> Any:
        """Run the cell as an agent's program at a place: `%%meet ag_python@HOST:PORT`."""
        args = parse_argstring(self.meet, line)
        if args.output is not None and not args.output.isidentifier():
            raise UsageError(f"-o {args.output}: not a Python variable name")
        try:
            place = split_target(args.target)[1]
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        bc = self.briefcase(args.folders, cell)
        if args.itinerary is not None:
            stops = [stop.strip() for stop in args.itinerary.split(",") if stop.strip()]
            if not stops:
                raise UsageError("--itinerary: give the places, comma-separated: A,B,C")
            bc[ITINERARY] = stops
        if args.fresh:
            bc[FRESH] = [b""]
        passport: dict[str, Any] = {"places": _listed(args.places, "--places"),
                                    "may": _listed(args.may, "--may")}
        try:
            if args.is_async:
                meet_id = tacoma.meet(args.target, bc, mode="async", timeout=args.timeout,
                                      **passport)
                value: Any = f"{meet_id}@{place}" if place else meet_id
            else:
                meet_id = new_meet_id()  # named here, to be named if it is interrupted
                try:
                    value = tacoma.meet(args.target, bc, timeout=args.timeout,
                                        meet_id=meet_id, **passport)
                except KeyboardInterrupt:  # cancelled at the place by tacoma.meet
                    started = place is not None or tacoma._embedded_running()
                    raise MeetCancelled(*cancelled(meet_id, place, started=started)) from None
        except tacoma.TacomaError as exc:
            safe_error(exc)  # the agent's message and traceback, shown escaped
            raise
        if args.output:
            self.user_ns[args.output] = value
            return None
        return value

    def briefcase(self, specs: list[str], cell: str) -> Briefcase:
        """The meet's briefcase: the cell as CODE, named after the cell, and the folders
        `-f NAME[=VAR]` asks for from the notebook's variables."""
        bc = Briefcase()
        for spec in specs:
            name, _, variable = spec.partition("=")
            variable = variable or name
            if name in (CODE, CODE_NAME):
                raise UsageError(f"-f {spec}: {name} is the cell itself; name the folder "
                                 "otherwise")
            if variable not in self.user_ns:
                raise UsageError(f"-f {spec}: the notebook has no variable {variable!r}")
            elements = folder_elements(spec, self.user_ns[variable])
            try:
                bc.setdefault(name).extend(Briefcase({name: elements})[name])
            except (TypeError, ValueError) as exc:
                raise UsageError(f"-f {spec}: {exc}") from None
        bc[CODE] = [cell]
        # The cell's own number, as its Out[N] shows it: IPython 9 counts execution_count
        # up before the cell runs, IPython 8 after; the display hook's count is right in both.
        number = self.shell.displayhook.prompt_count if self.shell else "?"
        bc[CODE_NAME] = [f"cell[{number}]"]
        return bc

    @property
    def user_ns(self) -> dict[str, Any]:
        """The notebook's variables."""
        if self.shell is None:
            raise UsageError("%%meet runs in an IPython shell")
        namespace: dict[str, Any] = self.shell.user_ns
        return namespace


def load_ipython_extension(ipython: Any) -> None:
    """Register the magics, and the escaped views of tacoma's values (see _views), with an
    IPython shell (`%load_ext tacoma`)."""
    ipython.register_magics(TacomaMagics)
    register(ipython)
