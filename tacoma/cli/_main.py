"""The `tacoma` group: the version option, and one command (or group) per module here.

Exit status: 0 on success, 2 for usage errors, 130 for an interrupt (Ctrl-C), and for a
failure one status per kind (`_common.EXIT_CODES`). Every failure is printed in the one
format of `_common.report` (`tacoma: KIND: message` on stderr, and under --json one JSON
object on stdout): click's own usage errors too, which is why the group runs click with
`standalone_mode=False` and prints what click would have printed itself.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import click

from .._version import __version__
from ._admin import kill, ps
from ._advise import advise
from ._bench import bench
from ._cabinet import cabinet
from ._common import INTERRUPTED_STATUS, USAGE_STATUS, report
from ._meet import meet, send
from ._place import doctor, install, place
from ._status import status
from ._testbed import testbed
from ._top import top
from ._trust import trust

__all__ = ["main"]


def _json_in(args: Sequence[str]) -> bool:
    """Whether the command line asks for --json (before any `--`): a usage error is found
    before click has read the options, and is answered as JSON all the same."""
    words = list(args)
    options = words[:words.index("--")] if "--" in words else words
    return "--json" in options


class TacomaGroup(click.Group):
    """A click group whose failures, usage errors included, are printed tacoma's way."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             **extra: Any) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        try:
            # "tacoma", not "python -m tacoma": the name the help and the errors give is
            # the one the user is told to type.
            value = super().main(argv, prog_name or "tacoma", complete_var,
                                 standalone_mode=False, **extra)
        except click.exceptions.NoArgsIsHelpError as exc:  # `tacoma` alone: the help
            exc.show()
            status = USAGE_STATUS
        except click.UsageError as exc:
            command = exc.ctx.command_path if exc.ctx is not None else "tacoma"
            report("UsageError", exc.format_message(), status=USAGE_STATUS,
                   hint=f"Try '{command} --help' for help.", hint_label="",
                   as_json=_json_in(argv), exit_now=False)
            status = USAGE_STATUS
        except click.ClickException as exc:
            report(getattr(exc, "kind", "Error"), exc.format_message(), status=exc.exit_code,
                   hint=getattr(exc, "hint", ""), as_json=_json_in(argv), exit_now=False)
            status = exc.exit_code
        except click.Abort as exc:  # click's form of KeyboardInterrupt (and of EOF)
            what = ("interrupted" if isinstance(exc.__cause__, KeyboardInterrupt | None)
                    else "input ended")
            report("Cancelled", what, status=INTERRUPTED_STATUS, as_json=_json_in(argv),
                   exit_now=False)
            status = INTERRUPTED_STATUS
        else:
            # A command that returned normally (--help, --version: click's Exit, as 0).
            status = value if isinstance(value, int) else 0
        if standalone_mode:
            sys.exit(status)
        return status


@click.group(cls=TacomaGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tacoma")
def main() -> None:
    """tacoma: mobile agents. Run a place, meet agents at it.

    \b
    Environment:
      TACOMA_PLACE      the place meet, send, status, ps, top and kill use when none
                        is named
      TACOMA_STATE_DIR  a place's state directory (every --state-dir's default)
      TACOMA_IDENTITY   the identity to meet places as (--identity)
      TACOMA_TRUST_DIR  the trust directory (the CA and identities)
      TACOMA_INSECURE   1: meet in plaintext (--insecure)
    """


for _command in (meet, send, status, ps, top, kill, bench, advise, place, doctor, install,
                 cabinet, trust, testbed):
    main.add_command(_command)
