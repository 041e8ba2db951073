"""Fixtures for the benchmarks: real servers in their own processes, one client event loop.

A place is the `tacoma place` command in a separate process, as in use; the passive baseline
is passive_echo.py, also in a separate process. Both are started once per session (the
memory and cold-start benchmarks get places of their own, so that nothing earlier in the
session is measured with them) and stopped with SIGTERM; a non-zero exit status fails the
session's teardown. The client side is one uvloop event loop per session, and each benchmarked
call is driven with `loop.run_until_complete`.

The benchmarks have a trust directory of their own (their places make its CA and local
identities, as a user's first place does; the mixed-load benchmark issues its principals
there), and their places' state directories lie outside /tmp (an agent has a private /tmp,
which it may not write where a state directory lies below it).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import platformdirs
import pytest

#: Set before tacoma reads it: every place and client of the session shares it.
TRUST_DIR = Path(tempfile.mkdtemp(prefix="tacoma-bench-trust-"))
os.environ["TACOMA_TRUST_DIR"] = str(TRUST_DIR / "trust")
for _name in ("TACOMA_IDENTITY", "TACOMA_INSECURE", "TACOMA_PLACE", "TACOMA_STATE_DIR"):
    os.environ.pop(_name, None)
#: Where the places' state directories go: not below /tmp.
RUNS = Path(platformdirs.user_cache_dir("tacoma", appauthor=False)) / "bench-runs"

from tacoma.client._runtime import new_event_loop  # noqa: E402 - after the environment

from _harness import (  # noqa: E402
    PassiveClient,
    ServerProcess,
    close_meet_connections,
    start_passive,
    start_place,
)


def pytest_configure(config: pytest.Config) -> None:
    if config.option.basetemp is None:
        RUNS.mkdir(parents=True, exist_ok=True, mode=0o700)
        config.option.basetemp = str(RUNS / f"run-{os.getpid()}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    shutil.rmtree(TRUST_DIR, ignore_errors=True)
    shutil.rmtree(RUNS / f"run-{os.getpid()}", ignore_errors=True)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """No workers: the suite's `-n auto` (setup.cfg) is for the tests; benchmarks time one
    thing at a time, on a machine doing nothing else."""
    return 0


#: Lines the benchmarks want printed after the table (what extra_info holds that the table
#: cannot show: rates, memory).
_SUMMARY = pytest.StashKey[list[str]]()


@pytest.fixture
def summary(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """Add a line to the summary printed at the end of the run."""
    lines = request.config.stash.setdefault(_SUMMARY, [])
    name = request.node.name
    return lambda line: lines.append(f"{name}: {line}")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    lines = terminalreporter.config.stash.get(_SUMMARY, [])
    if lines:
        terminalreporter.write_sep("-", "benchmark summary (from extra_info)")
        for line in lines:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """The client side's event loop (uvloop), shared by every benchmark of the session."""
    loop = new_event_loop()
    yield loop
    close_meet_connections(loop)
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()


def _serve(server: ServerProcess) -> Iterator[ServerProcess]:
    try:
        yield server
    finally:
        server.stop_checked()


@pytest.fixture(scope="session")
def place(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A place with the default pool (2 pre-started Python workers)."""
    yield from _serve(start_place(tmp_path_factory.mktemp("place") / "state"))


@pytest.fixture(scope="session")
def plaintext_place(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A place started with --insecure (no TLS), met in plaintext: the baseline of the
    TLS benchmarks, beside `place` (mutual TLS, the default)."""
    from tacoma.client._identity import register_place

    server = start_place(tmp_path_factory.mktemp("plaintext_place") / "state", "--insecure")
    register_place(server.address, None)
    yield from _serve(server)


@pytest.fixture(scope="session")
def fresh_workers_place(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A place with the default pool that keeps no worker warm (--reuse never): every
    meet gets a new pre-started worker, as before warm workers."""
    state = tmp_path_factory.mktemp("fresh_workers_place") / "state"
    yield from _serve(start_place(state, "--reuse", "never"))


@pytest.fixture
def cold_place(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A place without a worker pool and no warm workers: every Python meet starts its
    worker on the path."""
    state = tmp_path_factory.mktemp("cold_place") / "state"
    yield from _serve(start_place(state, "--pool-size", "0", "--reuse", "never"))


@pytest.fixture
def fresh_place(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A place of its own for one benchmark (its memory is not shared with others)."""
    yield from _serve(start_place(tmp_path_factory.mktemp("fresh_place") / "state"))


@pytest.fixture(scope="session")
def passive_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The passive msgpack echo server (PAN's passive node)."""
    yield from _serve(start_passive(Path(tmp_path_factory.mktemp("passive"))))


@pytest.fixture(scope="session")
def passive_client(loop: asyncio.AbstractEventLoop,
                   passive_server: ServerProcess) -> Iterator[PassiveClient]:
    """One connection to the passive server, kept for the session."""
    client = loop.run_until_complete(PassiveClient.connect(passive_server.address))
    yield client
    client.close()
    loop.run_until_complete(asyncio.sleep(0))  # let the transport run its close


@pytest.fixture(scope="session")
def passive_tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The passive echo server speaking mutual TLS 1.3 as a place does: the baseline of the
    meets over TLS (the default)."""
    yield from _serve(start_passive(Path(tmp_path_factory.mktemp("passive_tls")), tls=True))


@pytest.fixture(scope="session")
def passive_tls_client(loop: asyncio.AbstractEventLoop,
                       passive_tls_server: ServerProcess) -> Iterator[PassiveClient]:
    """One TLS connection to the passive server, with the identity meets are made with."""
    from tacoma.client._identity import credentials

    address = passive_tls_server.address
    client = loop.run_until_complete(
        PassiveClient.connect(address, credentials().context(address)))
    yield client
    client.close()
    loop.run_until_complete(asyncio.sleep(0))
