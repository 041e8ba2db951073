"""The `tacoma` group: the version option, and one command (or group) per module here.

Exit status: 0 on success, 2 for usage errors (click's), and for a failed meet one status
per kind of failure (`_common.EXIT_CODES`), with a one-line message on stderr, followed by
the agent's traceback or the place's detail where there is one.
"""

from __future__ import annotations

import click

from .._version import __version__
from ._admin import kill, ps
from ._bench import bench
from ._cabinet import cabinet
from ._meet import meet, send
from ._place import doctor, install, place
from ._status import status
from ._testbed import testbed
from ._trust import trust

__all__ = ["main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tacoma")
def main() -> None:
    """tacoma: mobile agents. Run a place, meet agents at it."""


for _command in (meet, send, status, ps, kill, bench, place, doctor, install, cabinet, trust,
                 testbed):
    main.add_command(_command)
