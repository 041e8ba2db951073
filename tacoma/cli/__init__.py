"""The `tacoma` command: a thin face over the Python API (STYLE 9), one module per group.

    _main      the `tacoma` group, which registers the commands below
    _meet      meet, send: a briefcase to an agent, or a message to a resident
    _admin     ps, kill: a place's agents, with its admin token
    _place     place, doctor, install: running a place here, and setting it up
    _cabinet   the cabinet group: a place's cabinets, read from its database
    _bench     bench (and bench overhead, bench breakdown): the benchmark suite
    _testbed   testbed up, down, status: separate network stacks to run places in
    _status    status: what became of a meet, by its id
    _common    exit statuses, folder arguments, briefcases printed and as JSON

Commands call the public API (`tacoma.meet`, `tacoma.Place`, ...); what a command needs
that is heavy (the client, the place, the interpreters) is imported when it runs, so that
`tacoma --help` and every other command start fast.
"""

from ._main import main as main

__all__ = ["main"]
