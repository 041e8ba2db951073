"""Shared fixtures: real places in real processes, on loopback.

`start_place(*flags)` runs `python -m tacoma place --listen 127.0.0.1:0 ...` as a child
process, waits for the one line it prints once it accepts meets, and stops it (SIGTERM,
then a check that it exited 0) when the test ends. Nothing of tacoma is mocked.

Starting a place is the suite's largest cost, so a test that only needs a place with the
default settings uses one shared by every test of its worker (`place`, `shared_place`,
`other_shared_place`: see SharedPlaces), and tests that need the same flags share a place
of their module (`place_fixture`).
"""

from __future__ import annotations

import contextlib
import os
import re
import selectors
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import platformdirs
import pytest
from tacoma.testbed import Testbed

READY = re.compile(r"tacoma place listening on (\S+) ")

def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """Two test files per core (`-n auto`, setup.cfg): most tests spend their time waiting
    on a place (a deadline, a restart, a lossy link), so a core can run a second one."""
    return min(8, 2 * (os.cpu_count() or 1))


#: The tests' own trust directory: their places make their CA and local identities there on
#: first start (as a user's first place does), and never touch the user's own. Set before
#: any test runs, so every place and client of the session, in or out of this process,
#: shares it.
TRUST_DIR = Path(tempfile.mkdtemp(prefix="tacoma-test-trust-"))
os.environ["TACOMA_TRUST_DIR"] = str(TRUST_DIR / "trust")
os.environ.pop("TACOMA_IDENTITY", None)
os.environ.pop("TACOMA_INSECURE", None)
# A user's default place and state directory must not steer the tests.
os.environ.pop("TACOMA_PLACE", None)
os.environ.pop("TACOMA_STATE_DIR", None)


def tls_connection(address: str, context: ssl.SSLContext | None = None) -> socket.socket:
    """A blocking socket to the place at `address`, its TLS handshake done as this session's
    default identity (or with `context`): bytes sent on it then reach the tacoma protocol."""
    from tacoma.client._identity import Credentials

    host, port = address.rsplit(":", 1)
    context = context or Credentials().context(address)
    assert context is not None
    sock = socket.create_connection((host, int(port)), timeout=10)
    return context.wrap_socket(sock, server_hostname=host)


def issue_identity(name: str, *roles: str, addresses: tuple[str, ...] = ()) -> Path:
    """An identity of the session's CA (made, with the CA, if need be): its file's path."""
    from tacoma.trust import TrustStore, _certs

    store = TrustStore()
    _certs.ensure_local(store)
    return _certs.issue(store, name, roles or ("client",), addresses)


#: Where the tests' temporary directories (and so their places' state directories) go: not
#: below /tmp, which each agent has a private one of (a place whose state directory lies
#: there works too, and is tested: tests/test_hostile.py).
RUNS = Path(platformdirs.user_cache_dir("tacoma", appauthor=False)) / "test-runs"


def pytest_configure(config: pytest.Config) -> None:
    if config.option.basetemp is None:
        RUNS.mkdir(parents=True, exist_ok=True, mode=0o700)
        config.option.basetemp = str(RUNS / f"run-{os.getpid()}")
    # The tests of Ctrl-C send SIGINT to the commands they start. A suite started in the
    # background (`pytest &` in a script, or under nohup) ignores SIGINT, and every process
    # it starts would inherit that and never hear their Ctrl-C; caught here instead, the
    # signal is back to its default in them.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    shutil.rmtree(TRUST_DIR, ignore_errors=True)
    shutil.rmtree(RUNS / f"run-{os.getpid()}", ignore_errors=True)


@dataclass
class RunningPlace:
    proc: subprocess.Popen[str]
    address: str
    state_dir: Path
    log_path: Path

    def log(self) -> str:
        """What the place wrote to stderr (its log)."""
        return self.log_path.read_text()

    def target(self, agent: str) -> str:
        return f"{agent}@{self.address}"

    def agents(self) -> list[dict[str, object]]:
        """The agents running at the place now (`tacoma ps`: ag_admin with its token)."""
        import json

        import tacoma

        token = (self.state_dir / "admin.token").read_text().strip()
        rows = tacoma.meet(self.target("ag_admin"), {"OP": ["ps"], "TOKEN": [token]},
                           timeout=10)
        return [json.loads(row) for row in rows.folder("AGENTS")]

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout)


def tacoma_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 120,
               default_place: bool = True) -> subprocess.CompletedProcess[str]:
    """The real command, as a person runs it: its exit status, stdout and stderr as text
    (`env` added to the environment; without `default_place`, no $TACOMA_PLACE nor
    $TACOMA_STATE_DIR of the caller's)."""
    base = {k: v for k, v in os.environ.items()
            if default_place or k not in ("TACOMA_PLACE", "TACOMA_STATE_DIR")}
    return subprocess.run([sys.executable, "-m", "tacoma", *args], capture_output=True,
                          text=True, timeout=timeout, check=False, env={**base, **(env or {})})


def launch_place(state_dir: Path, *flags: str, timeout: float = 30,
                 quiet: bool = True, listen: str = "127.0.0.1:0",
                 env: dict[str, str] | None = None,
                 prefix: tuple[str, ...] = ()) -> RunningPlace:
    """Start `tacoma place` (with `env` added to the environment, run by the `prefix`
    command if any: nsenter into a network namespace) and wait until it serves."""
    # The log goes to a file: a pipe nobody drains would block a chatty place.
    log_path = state_dir.parent / f"{state_dir.name}.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [*prefix, sys.executable, "-m", "tacoma", "place", "--listen", listen,
             "--state-dir", str(state_dir), *(["-q"] if quiet else []), *flags],
            stdout=subprocess.PIPE, stderr=log, text=True,
            env={**os.environ, **env} if env else None)
    assert proc.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    if not selector.select(timeout):
        proc.kill()
        raise AssertionError("place did not print its ready line in time")
    line = proc.stdout.readline()
    match = READY.match(line)
    if not match:
        proc.kill()
        proc.wait()
        raise AssertionError(f"place did not start: {line!r} {log_path.read_text()}")
    return RunningPlace(proc, match.group(1), state_dir, log_path)


@pytest.fixture
def start_place(tmp_path: Path) -> Iterator[Callable[..., RunningPlace]]:
    places: list[RunningPlace] = []

    def start(*flags: str, state_dir: Path | None = None, quiet: bool = True,
              listen: str = "127.0.0.1:0", env: dict[str, str] | None = None) -> RunningPlace:
        place = launch_place(state_dir or tmp_path / f"place{len(places)}", *flags,
                             quiet=quiet, listen=listen, env=env)
        places.append(place)
        return place

    yield start
    for place in places:
        if place.proc.poll() is None:
            assert place.stop() == 0, place.log()


def place_fixture(*flags: str) -> Any:
    """A module-scoped fixture: a place started with `flags` (none: the default settings),
    shared by the module's tests that need those settings, or a place of the module's own
    (assign it to the fixture's name: `small = place_fixture(...)`, `place = place_fixture()`
    for a module whose tests look at what its place logged or keeps)."""
    @pytest.fixture(scope="module")
    def fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningPlace]:
        running = launch_place(tmp_path_factory.mktemp("place"), *flags)
        yield running
        assert running.stop() == 0, running.log()

    return fixture


# ------------------------------------------------------------------ places shared by a worker
class SharedPlaces:
    """Places with default settings, started when a test first asks for one and shared by
    every test of this process (an xdist worker) that asks after it: `shared[0]`,
    `shared[1]`, ... are distinct places.

    Starting a place costs a second or two of CPU (its TLS identity, a zygote per language),
    and most tests only need *a* place: they name their own cabinets, meet ids, residents,
    installed agents and programs, so the tests before them do not show. A test that looks
    at a place's start, its log, its flags, its state directory or its totals, that stops,
    kills, fills or revokes it, or whose agents try more than a few addresses no place
    answers at (a principal gets 8 such failures a minute: place.promises._reach), starts
    its own (`start_place`, `place_fixture`)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.places: list[RunningPlace] = []
        self.made = 0

    def __getitem__(self, index: int) -> RunningPlace:
        while len(self.places) <= index:
            self.places.append(self._start())
        if self.places[index].proc.poll() is not None:
            # A test before stopped it: that one failed for it (see `settled`); the tests
            # after it get a new place instead.
            self.places[index] = self._start()
        return self.places[index]

    def _start(self) -> RunningPlace:
        self.made += 1
        return launch_place(self.root / f"shared{self.made}")

    def started(self) -> list[RunningPlace]:
        return [place for place in self.places if place.proc.poll() is None]

    def stop(self) -> None:
        codes = [(place.address, place.stop()) for place in self.started()]
        assert all(code == 0 for _, code in codes), codes


@pytest.fixture(scope="session")
def shared_places(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedPlaces]:
    places = SharedPlaces(tmp_path_factory.mktemp("shared"))
    yield places
    places.stop()


def settled(place: RunningPlace, timeout: float = 30) -> None:
    """End what a test left running at a shared place (an async meet asleep, a resident
    waiting): its agents killed, and gone, before the next test uses the place. A place
    the test stopped is an error of the test's."""
    import tacoma

    assert place.proc.poll() is None, \
        f"a test stopped the shared place {place.address}: it must start its own"
    token = (place.state_dir / "admin.token").read_text().strip()
    for row in place.agents():
        with contextlib.suppress(tacoma.MeetError):  # ended meanwhile
            tacoma.meet(place.target("ag_admin"), {
                "OP": ["kill"], "TOKEN": [token], "NAME": [str(row["meet"])],
                "PRINCIPAL": [str(row["principal"])]}, timeout=10)
    wait_until(lambda: not place.agents(), timeout, f"the agents left at {place.address}")


@pytest.fixture
def shared_place(shared_places: SharedPlaces) -> Iterator[RunningPlace]:
    """A place with default settings shared by the tests of this worker (`SharedPlaces`),
    with nothing running on it when the test begins and ends."""
    place = shared_places[0]
    yield place
    settled(place)


@pytest.fixture
def place(shared_place: RunningPlace) -> RunningPlace:
    """A place with default settings: this worker's `shared_place`. A module whose tests
    need one of the module's own says `place = place_fixture()`."""
    return shared_place


@pytest.fixture
def other_shared_place(shared_places: SharedPlaces) -> Iterator[RunningPlace]:
    """A second place with default settings shared like `shared_place`, for tests that need
    two (an agent's meet elsewhere, a trip)."""
    place = shared_places[1]
    yield place
    settled(place)


def wait_until(predicate: Callable[[], bool], timeout: float = 20.0,
               what: str = "condition") -> None:
    """Poll `predicate` until it holds; for effects that happen off the meet's path."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def process_status(pid: int) -> dict[str, str]:
    """The fields of /proc/PID/status; OSError if the process is gone."""
    text = Path(f"/proc/{pid}/status").read_text()
    return {k: v.strip() for k, _, v in (line.partition(":") for line in text.splitlines())}


def processes_of_uid(uid: int) -> list[int]:
    """The host's live (not zombie) processes with `uid` as any of their uids (an
    agent's: its uid is its own)."""
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            status = process_status(int(entry.name))
        except OSError:
            continue
        if not status.get("State", "").startswith("Z") and \
                str(uid) in status.get("Uid", "").split():
            pids.append(int(entry.name))
    return pids


def children_of(pid: int) -> list[int]:
    """The direct children of process `pid`."""
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is dead for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


is_root = os.geteuid() == 0
needs_root = pytest.mark.skipif(not is_root, reason="needs root (pids cgroup)")


# ---------------------------------------------------------------- hosts on separate stacks


@pytest.fixture(scope="module")
def testbed() -> Iterator[Testbed]:
    """Four hosts (h1..h4), each a network namespace of its own on one bridge that this
    process reaches too (tacoma.testbed), shared by a test module; skipped where testbeds
    cannot be made (not root, or no ip or nsenter)."""
    usable, why = Testbed.available()
    if not usable:
        pytest.skip(why)
    Testbed.cleanup_stale()  # what runs killed before their close left behind
    with Testbed(4) as bed:
        yield bed


def forward(down: socket.socket, up: socket.socket,
            seen: Callable[[socket.socket, bytes], None] | None = None) -> None:
    """Copy bytes both ways between two connected sockets until both ends have closed (each
    end's close passed on as a half-close), telling `seen` of each chunk and the socket it
    came from; then close both. For tests that stand between a client and a place."""
    selector = selectors.DefaultSelector()
    selector.register(down, selectors.EVENT_READ)
    selector.register(up, selectors.EVENT_READ)
    open_ends = 2
    with down, up:
        while open_ends:
            for key, _ in selector.select(60):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                try:
                    data = sock.recv(65536)
                except OSError:
                    data = b""
                other = up if sock is down else down
                if not data:
                    selector.unregister(sock)
                    open_ends -= 1
                    with contextlib.suppress(OSError):
                        other.shutdown(socket.SHUT_WR)
                    continue
                if seen is not None:
                    seen(sock, data)
                with contextlib.suppress(OSError):
                    other.sendall(data)


# ------------------------------------------------------------------ every language
#: The agent of each language the tests run programs in.
AGENT = {"python": "ag_python", "tcl": "ag_tcl", "scheme": "ag_scheme", "c": "ag_c",
         "wasm": "ag_wasm"}


def wasm_c_problem() -> str | None:
    """Why ag_wasm cannot run C agents here (no runtime, or no clang, lld, WASI libc or
    compiler-rt for wasm32-wasi), or None when it can."""
    from tacoma.agent._interpreter import discover_interpreters

    wasm = discover_interpreters().get("ag_wasm")
    if wasm is None:
        return "ag_wasm is not installed"
    from tacoma.interpreters.wasm import c_problem

    return wasm.check() or c_problem()


def language_params(agents: bool = False, leave_out: tuple[str, ...] = ()) -> list[object]:
    """A pytest parameter per language (its name, or with `agents` its agent's), skipped
    with the reason where its interpreter cannot run here; but the languages `leave_out`."""
    from tacoma.agent._interpreter import discover_interpreters

    installed = {i.language: i for i in discover_interpreters().values()}
    params = []
    for name, agent in AGENT.items():
        if name in leave_out:
            continue
        interpreter = installed.get(name)
        problem = "not installed" if interpreter is None else interpreter.check()
        params.append(pytest.param(agent if agents else name,
                                   marks=pytest.mark.skipif(problem is not None,
                                                            reason=f"{name}: {problem}")))
    return params


#: Each language's agent: read 4 bytes of lazy folder DATA into GOT, or write the error's
#: kind and message to ERR if it cannot.
LAZY_READER = {
    "ag_python": textwrap.dedent("""
        try:
            bc["GOT"] = [bc.read("DATA", 0, 4)]
        except LazyFolderError as exc:
            bc["ERR"] = [f"{exc.kind}: {exc}"]
    """),
    "ag_tcl": textwrap.dedent("""
        if {[catch {bc_read DATA 0 4} message options]} {
            bc_append_text ERR "[lindex [dict get $options -errorcode] 1]: $message"
        }
    """),
    "ag_scheme": textwrap.dedent("""
        (catch 'tacoma
          (lambda () (bc-append "GOT" (bc-read "DATA" 0 4)))
          (lambda (key kind message) (bc-append "ERR" (string-append kind ": " message))))
    """),
    "ag_c": textwrap.dedent("""
        #include <tacoma.h>
        int main(void) {
            tc_list got;
            if (tc_read(TC_SELF, "DATA", 0, 4, &got) != 0)
                tc_append_textf(TC_SELF, "ERR", "%s: %s", tc_error_kind(), tc_error());
            return 0;
        }
    """),
}

LAZY_READER["ag_wasm"] = LAZY_READER["ag_c"]  # the C source, built for WebAssembly


# ---------------------------------------------------------------------- a small disk
@contextlib.contextmanager
def small_disk(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` mounted at `path` (made), unmounted at the end: a place's state
    directory on a disk the test can fill (its log goes beside it, on the test's disk).
    Root only."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs",
                    str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


def fill(path: Path) -> None:
    """Write file `path` until its file system is full."""
    with open(path, "wb") as f:
        while (free := os.statvfs(path)).f_bavail:
            try:
                f.write(bytes(min(free.f_bavail * free.f_frsize, 2**20)))
                f.flush()
            except OSError:
                return


# ------------------------------------------------------------- two real identities
def identity(base: str, *roles: str) -> Path:
    """A fresh identity of the tests' CA (its file), named BASE-xxxxxxxx; a place's names
    127.0.0.1."""
    import uuid

    return issue_identity(f"{base}-{uuid.uuid4().hex[:8]}", *roles,
                          addresses=("127.0.0.1",) if "place" in roles else ())


def name_of(path: Path) -> str:
    """The name in an identity file's certificate."""
    from tacoma.trust import _certs

    return _certs.read_certificate(path.read_bytes()).name


def meet_as(who: Path, address: str, agent: str, folders: dict[str, Any] | None = None, *,
            code: str | None = None, mode: str = "sync", timeout: float = 60,
            meet_id: str = "", principal: str = "", papers: bytes | None = None) -> Any:
    """One meet over a connection of `who`'s own (an identity file): its Briefcase, or an
    async meet's id. `principal`: for a place identity, the principal it names, with
    `papers` (signed_papers: that principal's passport)."""
    import asyncio

    import tacoma
    from tacoma.client import PlaceClient
    from tacoma.client._identity import Credentials

    bc = tacoma.Briefcase()
    for name, elements in (folders or {}).items():
        bc[name] = elements
    if code is not None:
        bc["CODE"] = [code.encode()]

    async def run() -> Any:
        credentials = Credentials(who)
        credentials.signs = not principal  # a place hands on what it holds: it signs none
        client = await PlaceClient.connect(address, credentials=credentials)
        try:
            return await client.meet(agent, bc, mode, timeout, principal,  # type: ignore[arg-type]
                                     meet_id, papers=papers)
        finally:
            client.close()

    return asyncio.run(run())


def signed_papers(who: Path, *, agent: str = "ag_python", code: str = "", meet: str = "",
                  places: tuple[str, ...] = ("*",), seconds: float = 600,
                  may: tuple[str, ...] = ("meet", "move", "cabinet", "lazy", "status")
                  ) -> bytes:
    """The papers of a passport `who` signs for running `code` with `agent` (as its client
    would for a launch), for a test that speaks as a place holding it."""
    import time
    import uuid

    from tacoma.trust import Bundle
    from tacoma.trust._passport import Papers, Signer
    from tacoma.wire._program import code_digest

    signer = Signer(Bundle.read(who))
    program = code_digest([code.encode()]).hex() if code else ""
    return Papers(signer.passport(agent=agent, programs=(program,),
                                  meet=meet or uuid.uuid4().hex, places=places,
                                  deadline=time.time() + seconds, may=may)).to_wire()


def status_as(who: Path, place: RunningPlace, meet_id: str, **folders: list[bytes]) -> str:
    """What `who` hears of meet `meet_id` at `place` (its STATE)."""
    answer = meet_as(who, place.address, "ag_status", {"ID": [meet_id.encode()], **folders})
    return str(answer.text("STATE")[0])


def serves(place: RunningPlace) -> None:
    """The place serves the next normal meet."""
    import tacoma

    assert tacoma.meet(place.target("ag_echo"), {"OK": [b"1"]}, timeout=30) == {"OK": [b"1"]}


def waits_for(cabinet: str) -> str:
    """Python that waits until public cabinet `cabinet` holds GO (see `release`)."""
    return textwrap.dedent(f"""
        import time
        while True:
            try:
                if cabinet_read({cabinet!r}, "GO"):
                    break
            except Exception:
                pass
            time.sleep(0.05)
    """)


def release(place: RunningPlace, cabinet: str) -> None:
    """Let the agents waiting on public cabinet `cabinet` at `place` go on."""
    import tacoma

    tacoma.meet(place.target("ag_cabinet"),
                {"OP": ["append"], "CABINET": [cabinet], "GO": ["1"]}, timeout=30)


@pytest.fixture(scope="module")
def alice() -> Path:
    return identity("alice")


@pytest.fixture(scope="module")
def mallory() -> Path:
    return identity("mallory")
