"""Hostile WebAssembly agents: every attack an ag_wasm agent can make on its place fails.

Each test is one attack, written as a WebAssembly agent: C source the place builds with
clang for wasm32-wasi (tacoma.h, as any C agent), or WAT where C cannot say it (a forged
pointer handed to the host, an import no place gives, a start function); the build itself,
clang run on the agent's source, is attacked too. Each asserts the typed error the attack
is due (AgentKilled for a limit, AgentFailed for a trap or a fault, an "error bad-argument"
reply for a misused call), that its effect did not happen (no file on the host, no
connection, no byte of one meet's memory in the next), and ends with `still_serves`: a
WebAssembly meet that finds a fresh instance, and a meet in another language, are still
served.

What contains a WebAssembly agent is its instance first: a store of its own per meet (its
memory, globals and tables), the store's limits, epochs for its CPU time, WASI with no
preopened directory, socket or environment, and two host calls that check every pointer
and length. Around it, its worker is confined like every worker (tests/test_hostile.py), and
serves one principal only. All the attacks run at one place with tight limits
(`wasm_place`, as test_hostile's `hostile_place`); reuse of warm workers needs root.

clang -O2 removes a malloc whose memory is never observably used: the C bombs keep what
they allocate behind a volatile pointer, or they would allocate nothing.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import struct
import textwrap
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tacoma
from tacoma import Briefcase
from tacoma.agent._calls import Unframer, frame
from tacoma.place.workers._pool import LOG_CHARS_PER_MEET, LOG_LINE, LOG_LINES_PER_MEET
from tacoma.wire._protocol import DEFAULT_MAX_FRAME

from conftest import (
    AGENT,
    RunningPlace,
    launch_place,
    meet_as,
    release,
    wait_until,
    wasm_c_problem,
)

WASM_PROBLEM = wasm_c_problem()

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason=(
        "contained only as root: agent uids, cgroups and namespaces around the runtime, and "
        "warm workers kept per principal, are what these attacks meet")),
    pytest.mark.skipif(WASM_PROBLEM is not None,
                       reason=f"WebAssembly C agents cannot run here: {WASM_PROBLEM}"),
]

MiB = 2**20
CPU_SECONDS = 2
MEMORY = 256 * MiB
FILE_SIZE = 1 * MiB
#: The largest briefcase (the place's default --max-briefcase): the bound of a request.
LARGEST_BRIEFCASE = DEFAULT_MAX_FRAME
#: Meets in a row that must each find a fresh instance.
MEETS_IN_A_ROW = 20


def same_build_in_either_mode(place: RunningPlace) -> None:
    """Skip the in-place variant of an attack on the C build alone: the place runs the
    same confined build in either mode (tried once, at the place with workers)."""
    if "in-place" in place.state_dir.name:
        pytest.skip("the C build is the same confined process in either mode")


@pytest.fixture(scope="module", params=["worker", "in-place"])
def wasm_place(request: pytest.FixtureRequest,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningPlace]:
    """One place with tight limits for all the attacks: instances in confined workers (the
    default), and again on a place that runs them in its own process
    (--instances-in-place), where the runtime is the only wall."""
    mode = ("--instances-in-place",) if request.param == "in-place" else ()
    running = launch_place(
        tmp_path_factory.mktemp(f"wasm-hostile-{request.param}"),
        "--cpu-seconds", str(CPU_SECONDS), "--memory", str(MEMORY), "--processes", "32",
        "--disk", str(16 * MiB), "--file-size", str(FILE_SIZE), "--open-files", "64",
        "--meet-seconds", "30", *mode)
    yield running
    assert running.stop() == 0, running.log()


# ------------------------------------------------------------------------------ C agents
#: Put before every C attack:
#:   arg NAME          the first element of folder NAME, as text ("" if none)
#:   attempt LABEL R   one attack step's outcome, "LABEL|ok|R" or "LABEL|err|strerror"
#:                     appended to folder R (errno is still the call's when it starts)
#:   attempt_wasi      the same for a raw WASI call, which returns its errno
#:   hold FOLDER       publish FOLDER in the cabinet named in CAB, then wait (at most
#:                     30 s) until the test writes GO there
C_PRELUDE = r"""
#include <tacoma.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <wasi/api.h>

#define UNUSED __attribute__((unused))

static UNUSED const char *arg(const char *name) {
    tc_list values;  /* never freed: the text lives as long as the agent */
    if (tc_text(TC_SELF, name, &values) != 0 || values.count == 0) return "";
    return (const char *)values.items[0].data;
}
static UNUSED void attempt(const char *label, long result) {
    int code = errno;
    if (result < 0) tc_append_textf(TC_SELF, "R", "%s|err|%s", label, strerror(code));
    else tc_append_textf(TC_SELF, "R", "%s|ok|%ld", label, result);
}
static UNUSED void attempt_wasi(const char *label, __wasi_errno_t code) {
    if (code != 0) tc_append_textf(TC_SELF, "R", "%s|err|%s", label, strerror(code));
    else tc_append_textf(TC_SELF, "R", "%s|ok|0", label);
}
static UNUSED void hold(const char *folder) {
    tc_cabinet_append(arg("CAB"), folder, "1", 1, 0);
    for (int i = 0; i < 600; i++) {
        tc_list go;
        if (tc_cabinet_read(arg("CAB"), "GO", &go) == 0) {
            size_t n = go.count;
            tc_list_free(&go);
            if (n) return;
        }
        usleep(50000);
    }
}
"""


def c_agent(body: str) -> str:
    """A C agent: the prelude, then `body` (its main)."""
    return C_PRELUDE + textwrap.dedent(body)


# ---------------------------------------------------------------------------- WAT agents
def wat_string(data: bytes) -> str:
    """`data` as a WAT string, every byte escaped."""
    return '"' + "".join(f"\\{byte:02x}" for byte in data) + '"'


#: Where a WAT agent builds the request that records what it found: `append 0 R BYTES`,
#: its last part's length and bytes written in place after RECORD_HEAD.
RECORD_AT = 32768
RECORD_HEAD = frame([b"append", b"0", b"R", b""])[:-4]
RECORD_BYTES = RECORD_AT + len(RECORD_HEAD) + 4

#: The host calls and one page of memory, for a WAT agent: $record appends LENGTH bytes of
#: its memory at POINTER to folder R of its briefcase; $record_reply appends the reply of
#: its last call (LENGTH bytes, as tacoma.call returned) there.
HOST_CALLS = f"""
  (import "tacoma" "call" (func $call (param i32 i32) (result i32)))
  (import "tacoma" "reply" (func $reply (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const {RECORD_AT}) {wat_string(RECORD_HEAD)})
  (func $length_of_record (param $n i32)
    (i32.store8 (i32.const {RECORD_BYTES - 4}) (i32.shr_u (local.get $n) (i32.const 24)))
    (i32.store8 (i32.const {RECORD_BYTES - 3}) (i32.shr_u (local.get $n) (i32.const 16)))
    (i32.store8 (i32.const {RECORD_BYTES - 2}) (i32.shr_u (local.get $n) (i32.const 8)))
    (i32.store8 (i32.const {RECORD_BYTES - 1}) (local.get $n)))
  (func $record (param $pointer i32) (param $length i32)
    (call $length_of_record (local.get $length))
    (memory.copy (i32.const {RECORD_BYTES}) (local.get $pointer) (local.get $length))
    (drop (call $call (i32.const {RECORD_AT})
                      (i32.add (i32.const {RECORD_BYTES - RECORD_AT}) (local.get $length)))))
  (func $record_reply (param $length i32)
    (call $length_of_record (local.get $length))
    (drop (call $reply (i32.const {RECORD_BYTES}) (local.get $length)))
    (drop (call $call (i32.const {RECORD_AT})
                      (i32.add (i32.const {RECORD_BYTES - RECORD_AT}) (local.get $length)))))
"""


def wat_agent(body: str, data: dict[int, bytes] | None = None, declarations: str = "") -> str:
    """A WAT agent with the host calls: `body` is its _start's, `data` what its memory
    holds at the start (address: bytes, below RECORD_AT), `declarations` its other fields
    (globals, functions)."""
    segments = "".join(f"\n  (data (i32.const {at}) {wat_string(content)})"
                       for at, content in (data or {}).items())
    return (f"(module{HOST_CALLS}{segments}\n  {declarations}\n"
            f'  (func (export "_start")\n{body}))\n')


#: A request every agent may make, and the address it is written at by `requests_agent`.
PLACE_REQUEST = frame([b"place"])
REQUESTS_AT = 1024


def requests_agent(*requests: bytes) -> str:
    """A WAT agent that hands each of `requests` (its bytes, well framed or not) to
    tacoma.call in turn and records each reply in folder R."""
    data, body, at = {}, [], REQUESTS_AT
    for request in requests:
        data[at] = request
        body.append(f"    (call $record_reply (call $call (i32.const {at}) "
                    f"(i32.const {len(request)})))")
        at += len(request) + 8
    assert at < RECORD_AT
    return wat_agent("\n".join(body), data)


def unframe(message: bytes) -> list[bytes]:
    """The parts of one whole framed message (a reply an agent recorded)."""
    unframer = Unframer(len(message) + 1, "the reply")
    unframer.feed(message)
    parts = unframer.next()
    assert parts is not None and not unframer.rest(), message
    return parts


# ---------------------------------------------------------------- a fresh instance, told
#: The nonzero bytes a WAT agent's memory holds at its start: its data segments.
WAT_DATA_BYTES = sum(1 for byte in RECORD_HEAD if byte)

#: A WAT agent that records, as three little-endian u32 in folder R, what it found: its
#: global (0 when it starts), its memory's pages (1) and the nonzero bytes in it (its
#: data's only); then leaves all three changed for whatever comes next: its global set,
#: its memory grown to 16 pages and every byte of it written.
WITNESS_WAT = wat_agent("""
    (local $at i32) (local $nonzero i32)
    (block $counted
      (loop $next
        (br_if $counted (i32.ge_u (local.get $at)
                                  (i32.mul (memory.size) (i32.const 65536))))
        (if (i32.load8_u (local.get $at))
          (then (local.set $nonzero (i32.add (local.get $nonzero) (i32.const 1)))))
        (local.set $at (i32.add (local.get $at) (i32.const 1)))
        (br $next)))
    (i32.store (i32.const 0) (global.get $left))
    (i32.store (i32.const 4) (memory.size))
    (i32.store (i32.const 8) (local.get $nonzero))
    (call $record (i32.const 0) (i32.const 12))
    (global.set $left (i32.const 0x5EED))
    (drop (memory.grow (i32.const 15)))
    (memory.fill (i32.const 0) (i32.const 0xAB) (i32.mul (memory.size) (i32.const 65536)))
""", declarations="(global $left (mut i32) (i32.const 0))")

#: The same in C: its static variable, the pages of memory at main, and the nonzero bytes
#: of a static array and of a MiB of memory it grows; then it writes all of them.
WITNESS_C = c_agent("""
    static uint32_t left;
    static unsigned char area[1 << 16];
    int main(void) {
        uint32_t found[3] = {left, (uint32_t)__builtin_wasm_memory_size(0), 0};
        size_t page = __builtin_wasm_memory_grow(0, 16);
        if (page == (size_t)-1) tc_fail("no memory for the witness");
        volatile unsigned char *grown = (volatile unsigned char *)(page * 65536);
        for (size_t i = 0; i < sizeof area; i++)
            found[2] += ((volatile unsigned char *)area)[i] != 0;
        for (size_t i = 0; i < 1 << 20; i++) found[2] += grown[i] != 0;
        tc_append(TC_SELF, "R", found, sizeof found);
        left = 0x5EED;
        memset(area, 0xAB, sizeof area);
        for (size_t i = 0; i < 1 << 20; i++) grown[i] = 0xAB;
        return 0;
    }
""")


def witnessed(result: Briefcase) -> tuple[int, int, int]:
    """What a witness found: (its global, its pages at the start, nonzero bytes)."""
    left, pages, nonzero = struct.unpack("<3I", result["R"][0])
    return left, pages, nonzero


# ------------------------------------------------------------------------------- helpers
def meet(place: RunningPlace, code: str, timeout: float = 60, **folders: list[str]
         ) -> Briefcase:
    """Meet ag_wasm with `code` (C, or WAT) and `folders`."""
    return tacoma.meet(place.target("ag_wasm"), Briefcase(folders), code=code,
                       timeout=timeout)


def outcomes(result: Briefcase) -> dict[str, tuple[str, str]]:
    """The agent's `attempt`s: label -> ("ok" | "err", detail)."""
    found: dict[str, tuple[str, str]] = {}
    for line in result.text("R"):
        label, outcome, detail = line.split("|", 2)
        found[label] = (outcome, detail)
    return found


def refused(found: dict[str, tuple[str, str]], label: str, *words: str) -> None:
    """Assert that attack step `label` was refused, with one of `words` (if any) in its
    error."""
    assert label in found, f"{label} was not attempted: {found}"
    outcome, detail = found[label]
    assert outcome == "err", f"{label}: {outcome} {detail!r} (all: {found})"
    if words:
        assert any(w in detail.lower() for w in words), f"{label}: {detail!r}"


def still_serves(place: RunningPlace) -> None:
    """The place is up; a WebAssembly meet finds a fresh instance (nothing of the meets
    before it), and meets in another language and of the place's own agents are served."""
    assert place.proc.poll() is None, place.log()
    assert witnessed(meet(place, WITNESS_WAT)) == (0, 1, WAT_DATA_BYTES)
    assert tacoma.meet(place.target(AGENT["python"]), code='bc["OK"] = [b"yes"]\n',
                       timeout=60)["OK"] == [b"yes"]
    assert tacoma.meet(place.target("ag_echo"), {"PING": [b"1"]}, timeout=30)["PING"] == [b"1"]


def wasm_pool(place: RunningPlace) -> Any:
    """The ag_wasm pool in the place's status: its warm and fresh meets."""
    token = (place.state_dir / "admin.token").read_text().strip()
    status = tacoma.place_status(place.address, token=token)
    return next(pool for pool in status.pools if pool.agent == "ag_wasm")


def published(place: RunningPlace, cabinet: str, folder: str) -> list[bytes]:
    """Folder `folder` of public cabinet `cabinet` (empty while there is none)."""
    try:
        got = tacoma.meet(place.target("ag_cabinet"), {
            "OP": ["read"], "CABINET": [cabinet], "FOLDER": [folder]}, timeout=10)
    except tacoma.CabinetError:
        return []
    return got.get(folder, [])


def output_files(place: RunningPlace) -> dict[str, int]:
    """The agents' output files at the place now, and their sizes."""
    sizes = {}
    for path in (place.state_dir / "work").glob("*.out"):
        with contextlib.suppress(FileNotFoundError):  # its worker ended meanwhile
            sizes[path.name] = path.stat().st_size
    return sizes


# ============================================================================ memory bombs
#: The memory bombs, and what each must end in: AgentKilled by the memory limit.
MEMORY_BOMBS = {
    # A C agent's way: malloc and write until malloc fails, then abort (a trap).
    "c-malloc": c_agent("""
        static void *volatile kept;
        int main(void) {
            for (;;) {
                char *block = malloc(1 << 20);
                if (block == NULL) abort();
                memset(block, 1, 1 << 20);
                kept = block;
            }
        }
    """),
    "wat-memory-grow": """(module
      (memory (export "memory") 1)
      (func (export "_start")
        (loop $more
          (br_if $more (i32.ne (memory.grow (i32.const 16)) (i32.const -1))))
        unreachable))
    """,
    # Memory the worker holds for the agent: a briefcase appended to without end, and
    # briefcase after briefcase (a worker's own memory, outside the instance's).
    "c-briefcase-append": c_agent("""
        static char chunk[1 << 16];
        int main(void) {
            memset(chunk, 'x', sizeof chunk);
            for (int i = 0;; i++)
                if (tc_append(TC_SELF, "X", chunk, sizeof chunk) != 0)
                    tc_fail("append %d: %s: %s", i, tc_error_kind(), tc_error());
        }
    """),
    "c-briefcase-new": c_agent("""
        static char chunk[1 << 16];
        int main(void) {
            memset(chunk, 'x', sizeof chunk);
            for (int i = 0;; i++) {
                tc_bc bc = tc_new();
                if (bc == TC_ERROR || tc_append(bc, "X", chunk, sizeof chunk) != 0)
                    tc_fail("briefcase %d: %s: %s", i, tc_error_kind(), tc_error());
            }
        }
    """),
}
#: What each bomb must end in, where not AgentKilled "by its memory limit ... WebAssembly
#: memory reached N MiB": what the worker holds for the agent is refused, call by call,
#: past the most its briefcases may hold (the agent fails with the refusal it got).
BOMB_ERRORS = {
    "c-briefcase-append": r"limit-exceeded: the agent's briefcases would hold [\d,]+ bytes, "
                          r"over the [\d,]+ it may hold",
    "c-briefcase-new": r"limit-exceeded: the agent's briefcases would hold [\d,]+ bytes, "
                       r"over the [\d,]+ it may hold",
}


@pytest.mark.parametrize("bomb", MEMORY_BOMBS)
def test_a_memory_bomb_is_killed_by_the_memory_limit(wasm_place: RunningPlace,
                                                     bomb: str) -> None:
    """Memory taken without end by the instance (malloc, memory.grow) ends the meet as
    AgentKilled by its memory limit, the instance's memory never past it; through the
    agent API (briefcases the worker keeps for it), each call past the most the agent's
    briefcases may hold is refused as limit-exceeded, and the worker lives on."""
    pattern = BOMB_ERRORS.get(
        bomb, r"agent killed by its memory limit: its WebAssembly memory reached (\d+) MiB "
              r"of the (\d+) MiB it may have")
    with pytest.raises((tacoma.AgentKilled, tacoma.AgentFailed)) as info:
        meet(wasm_place, MEMORY_BOMBS[bomb])
    assert isinstance(info.value, tacoma.AgentKilled) or bomb in BOMB_ERRORS, info.value
    match = re.search(pattern, str(info.value))
    assert match, f"{type(info.value).__name__}: {info.value}"
    if match.groups():
        reached, most = (int(n) for n in match.groups())
        assert reached <= most <= MEMORY // MiB
    still_serves(wasm_place)


def test_an_initial_memory_over_the_limit_is_refused(wasm_place: RunningPlace) -> None:
    """A module whose memory starts larger than the limit (3.7 GiB), or with a table
    larger than any instance may have, is not instantiated: AgentFailed saying why."""
    with pytest.raises(tacoma.AgentFailed, match=r"60000 pages exceeds memory limits"):
        meet(wasm_place, '(module (memory (export "memory") 60000) (func (export "_start")))')
    with pytest.raises(tacoma.AgentFailed, match=r"table minimum size .* exceeds table limits"):
        meet(wasm_place, '(module (table 2000000 funcref) (func (export "_start")))')
    still_serves(wasm_place)


def test_malloc_fails_at_the_memory_limit(wasm_place: RunningPlace) -> None:
    """An agent that checks what malloc returns sees it fail (NULL) before its instance's
    memory passes the meet's limit, and may go on: its meet ends well."""
    result = meet(wasm_place, c_agent("""
        static void *volatile kept;
        int main(void) {
            size_t total = 0;
            char *block;
            while ((block = malloc(1 << 20)) != NULL) {
                memset(block, 1, 1 << 20);
                kept = block;
                total += 1 << 20;
            }
            tc_append_textf(TC_SELF, "TOTAL", "%zu", total);
            return 0;
        }
    """))
    total = int(result.text("TOTAL")[0])
    assert 8 * MiB <= total < MEMORY, total
    still_serves(wasm_place)


# ========================================================================== endless loops
ENDLESS = {
    "c": c_agent("""
        int main(void) {
            volatile unsigned long spins = 0;
            for (;;) spins++;
        }
    """),
    "wat": '(module (func (export "_start") (loop $forever (br $forever))))',
    # CPU time spent in the host, on the agent's behalf, counts too.
    "c-host-calls": c_agent("""
        int main(void) { for (;;) tc_folder_size(TC_SELF, "X"); }
    """),
}


@pytest.mark.parametrize("loop", ENDLESS)
def test_an_endless_loop_is_killed_at_its_cpu_limit(wasm_place: RunningPlace,
                                                    loop: str) -> None:
    """A loop that never ends, in the agent's code or through host calls, is killed once
    it spent its CPU time: AgentKilled saying so."""
    with pytest.raises(tacoma.AgentKilled,
                       match=rf"agent killed: its CPU time limit of {CPU_SECONDS} s was "
                             r"reached"):
        meet(wasm_place, ENDLESS[loop])
    still_serves(wasm_place)


def test_sleeping_past_the_meets_time_ends_the_agent(wasm_place: RunningPlace) -> None:
    """An agent asleep in a WASI call (no CPU time spent, no epoch check reached) past its
    meet's time: MeetTimeout for the caller, and the agent is gone from the place."""
    sleeper = c_agent("""
        int main(void) {
            if (*arg("SLEEP")) sleep(100);
            return 0;
        }
    """)
    meet(wasm_place, sleeper)  # built now, so that its meet's time is all asleep
    with pytest.raises(tacoma.MeetTimeout):
        meet(wasm_place, sleeper, timeout=2, SLEEP=["1"])
    wait_until(lambda: not wasm_place.agents(), 20, "the sleeping agent to be ended")
    still_serves(wasm_place)


# ========================================================================= deep recursion
RECURSION = {
    "wat": '(module (func $deeper (export "_start") (call $deeper)))',
    # No frame in linear memory: each call is one of the engine's own stack's frames.
    "c": c_agent("""
        static volatile int sink;
        __attribute__((noinline)) static int deeper(int n) {
            sink = n;
            int below = deeper(n + 1);
            sink = below;
            return below + 1;
        }
        int main(void) { return deeper(0); }
    """),
    # A volatile local lives in the C stack, in linear memory, which runs out first.
    "c-volatile-local": c_agent("""
        static int deeper(int n) {
            volatile char frame[64];
            frame[n & 63] = (char)n;
            return deeper(n + 1) + frame[(n + 1) & 63];
        }
        int main(void) { return deeper(0); }
    """),
}
#: The trap each ends in: the engine's stack exhausted, or the C stack (in linear memory)
#: run past the bottom of the memory.
RECURSION_TRAP = {"wat": "call stack exhausted", "c": "call stack exhausted",
                  "c-volatile-local": "out of bounds memory access"}


@pytest.mark.parametrize("program", RECURSION)
def test_deep_recursion_traps(wasm_place: RunningPlace, program: str) -> None:
    """Recursion without end traps, as a failure of the agent's own (AgentFailed, with the
    trap's cause), not a crash of its worker or the place."""
    with pytest.raises(tacoma.AgentFailed) as info:
        meet(wasm_place, RECURSION[program])
    assert str(info.value).startswith(
        f"WebAssembly agent trapped (wasm trap: {RECURSION_TRAP[program]})"), info.value
    if program.startswith("c"):
        assert "deeper" in info.value.detail, info.value.detail  # the backtrace names it
    still_serves(wasm_place)


# ============================================================================= host files
FILES = c_agent("""
    int main(void) {
        const char *token = arg("TOKEN"), *state = arg("STATE"), *host = arg("HOST");
        char path[4096], label[64];
        struct stat st;
        attempt("open /etc/passwd", open("/etc/passwd", O_RDONLY));
        attempt("open ../../etc/passwd", open("../../etc/passwd", O_RDONLY));
        snprintf(path, sizeof path, "%s/admin.token", state);
        attempt("open the admin token", open(path, O_RDONLY));
        attempt("unlink the admin token", unlink(path));
        snprintf(path, sizeof path, "%s/%s", state, token);
        attempt("create in the state directory", open(path, O_WRONLY | O_CREAT, 0600));
        snprintf(path, sizeof path, "%s/%s", host, token);
        FILE *f = fopen(path, "w");
        attempt("fopen in the test's directory", f ? 0 : -1);
        snprintf(path, sizeof path, "/tmp/%s", token);
        f = fopen(path, "w");
        attempt("fopen in /tmp", f ? 0 : -1);
        snprintf(path, sizeof path, "/tmp/%s-dir", token);
        attempt("mkdir in /tmp", mkdir(path, 0700));
        snprintf(path, sizeof path, "%s-here", token);
        attempt("create here", open(path, O_WRONLY | O_CREAT, 0600));
        attempt("symlink here", symlink("/etc/passwd", path));
        DIR *d = opendir("/");
        attempt("opendir /", d ? 0 : -1);
        d = opendir(".");
        attempt("opendir .", d ? 0 : -1);
        attempt("stat /", stat("/", &st));
        /* WASI itself, under libc: no descriptor past stdio is a directory to open in. */
        for (__wasi_fd_t fd = 0; fd < 8; fd++) {
            __wasi_prestat_t prestat;
            __wasi_fd_t opened;
            snprintf(label, sizeof label, "prestat of fd %u", (unsigned)fd);
            attempt_wasi(label, __wasi_fd_prestat_get(fd, &prestat));
            snprintf(label, sizeof label, "path_open at fd %u", (unsigned)fd);
            attempt_wasi(label, __wasi_path_open(fd, 0, "etc/passwd", 0,
                                                 __WASI_RIGHTS_FD_READ, 0, 0, &opened));
        }
        return 0;
    }
""")


def test_no_host_file_can_be_read_or_written(wasm_place: RunningPlace, tmp_path: Path) -> None:
    """WASI is given no preopened directory: every path, absolute or relative (/etc/passwd,
    the place's admin token, /tmp, the test's own directory, the working directory), fails
    with ENOTCAPABLE, and every descriptor past stdio is EBADF. Nothing is created on the
    host, and the admin token is still there."""
    token = f"wasm-hostile-{uuid.uuid4().hex[:12]}"
    admin_token = (wasm_place.state_dir / "admin.token").read_bytes()
    found = outcomes(meet(wasm_place, FILES, TOKEN=[token], STATE=[str(wasm_place.state_dir)],
                          HOST=[str(tmp_path)]))
    paths = [label for label in found if not label.startswith(("prestat", "path_open"))]
    assert len(paths) == 13, found
    for label in paths:
        refused(found, label, "capabilities insufficient")
    for fd in range(8):
        refused(found, f"prestat of fd {fd}", "bad file descriptor")
        refused(found, f"path_open at fd {fd}", *(
            ("bad file descriptor",) if fd > 2 else ("not a directory", "bad file descriptor",
                                                     "capabilities insufficient")))
    assert not list(tmp_path.rglob(f"*{token}*"))
    for directory in (wasm_place.state_dir, Path("/tmp"), Path("/var/tmp")):
        assert not list(directory.glob(f"*{token}*")), directory
    assert (wasm_place.state_dir / "admin.token").read_bytes() == admin_token
    still_serves(wasm_place)


@pytest.mark.parametrize("secret", ["etc-shadow", "admin-token", "ca-key"])
def test_a_build_includes_no_secret_of_the_host(wasm_place: RunningPlace, secret: str) -> None:
    """The place builds C source with clang, confined like an agent: `#include` of a host
    file no agent may read (/etc/shadow, the place's admin token, the tests' CA key) does
    not compile, and clang's messages, which the caller gets, hold nothing of it."""
    same_build_in_either_mode(wasm_place)
    path = {"etc-shadow": Path("/etc/shadow"),
            "admin-token": wasm_place.state_dir / "admin.token",
            "ca-key": Path(os.environ["TACOMA_TRUST_DIR"]) / "ca.key"}[secret]
    lines = [line for line in path.read_text().splitlines() if len(line.strip()) > 8]
    assert lines, path
    with pytest.raises(tacoma.AgentFailed, match="does not compile") as info:
        meet(wasm_place, f'#include "{path}"\nint main(void) {{ return 0; }}\n')
    told = f"{info.value}\n{info.value.detail}"
    assert not [line for line in lines if line.strip() in told], told
    still_serves(wasm_place)


# ================================================================================ network
NETWORK = c_agent("""
    int main(void) {
        char path[256], label[64], got[4];
        for (int fd = 0; fd < 16; fd++) {
            snprintf(label, sizeof label, "accept on fd %d", fd);
            attempt(label, accept(fd, NULL, NULL));
        }
        attempt("send on fd 3", send(3, "x", 1, 0));
        attempt("recv on fd 3", recv(3, got, sizeof got, 0));
        attempt("shutdown stdout", shutdown(1, SHUT_RDWR));
        snprintf(path, sizeof path, "/dev/tcp/127.0.0.1/%s", arg("PORT"));
        attempt("open /dev/tcp to the listener", open(path, O_RDWR));
        snprintf(path, sizeof path, "/dev/tcp/127.0.0.1/%s", arg("PLACE_PORT"));
        attempt("open /dev/tcp to the place", open(path, O_RDWR));
        return 0;
    }
""")


def test_no_network(wasm_place: RunningPlace) -> None:
    """WASI preview 1 makes no socket, and the agent is given none: accept, send and recv
    fail on every descriptor (stdio is no socket, the rest are not there), no path leads
    to one, and a listener on the host's loopback hears nothing."""
    place_port = wasm_place.address.rsplit(":", 1)[1]
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = str(listener.getsockname()[1])
        found = outcomes(meet(wasm_place, NETWORK, PORT=[port], PLACE_PORT=[place_port]))
        for fd in range(16):
            refused(found, f"accept on fd {fd}",
                    "not a socket" if fd <= 2 else "bad file descriptor")
        refused(found, "send on fd 3", "bad file descriptor")
        refused(found, "recv on fd 3", "bad file descriptor")
        refused(found, "shutdown stdout", "not a socket")
        refused(found, "open /dev/tcp to the listener", "capabilities insufficient")
        refused(found, "open /dev/tcp to the place", "capabilities insufficient")
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()  # no connection is waiting
    still_serves(wasm_place)


def test_the_socket_calls_do_not_exist(wasm_place: RunningPlace) -> None:
    """A C agent that calls socket() and connect() (to the place's own port) does not
    build: WASI's libc has neither, and the linker says so (AgentFailed)."""
    port = wasm_place.address.rsplit(":", 1)[1]
    program = textwrap.dedent(f"""
        #include <tacoma.h>
        #include <netinet/in.h>
        #include <sys/socket.h>
        int socket(int, int, int);
        int connect(int, const struct sockaddr *, socklen_t);
        int main(void) {{
            struct sockaddr_in to = {{0}};
            to.sin_family = AF_INET;
            to.sin_port = htons({port});
            to.sin_addr.s_addr = htonl(0x7f000001);
            int fd = socket(AF_INET, SOCK_STREAM, 0);
            return connect(fd, (struct sockaddr *)&to, sizeof to);
        }}
    """)
    with pytest.raises(tacoma.AgentFailed, match=r"does not compile.*undefined symbol: socket"):
        meet(wasm_place, program)
    still_serves(wasm_place)


# ================================================================ another meet's data
@pytest.mark.parametrize("who", ["one-program", "two-programs", "two-principals"])
def test_no_meet_sees_the_memory_or_globals_of_the_one_before(
        wasm_place: RunningPlace, alice: Path, mallory: Path, who: str) -> None:
    """Meet after meet, most served by a warm worker (the place's status counts them),
    finds its globals, its memory's size and every byte of it as the module declares
    them, though the meet before set its global, grew its memory and wrote all of it:
    whether that meet was the same program's (WAT, or C: a static variable, a static
    array and memory it grew), another program's of the same principal, or another
    principal's (alice's and mallory's, two identities of the tests' CA)."""
    programs = {"wat": WITNESS_WAT, "c": WITNESS_C}
    order = {"one-program": [(alice, "wat"), (alice, "c")],
             "two-programs": [(alice, "wat"), (alice, "c")],
             "two-principals": [(alice, "wat"), (mallory, "wat"), (alice, "c"),
                                (mallory, "c")]}[who]
    if who == "one-program":  # each program's meets in a row, not interleaved
        plan = [step for step in order for _ in range(MEETS_IN_A_ROW)]
    else:
        plan = order * (2 * MEETS_IN_A_ROW // len(order))
    pages: dict[str, int] = {}
    warm = wasm_pool(wasm_place).warm
    for n, (identity, program) in enumerate(plan):
        result = meet_as(identity, wasm_place.address, "ag_wasm", code=programs[program])
        left, at_start, nonzero = witnessed(result)
        assert left == 0, f"meet {n} ({program}) found its global set: {left:#x}"
        assert nonzero == (WAT_DATA_BYTES if program == "wat" else 0), \
            f"meet {n} ({program}) found {nonzero} bytes written"
        assert at_start == pages.setdefault(program, 1 if program == "wat" else at_start), \
            f"meet {n} ({program}) started with {at_start} pages"
    # Each principal's first meets are served fresh (a worker is kept from the second), and
    # a meet that finds its warm worker still making itself clean may be too.
    assert wasm_pool(wasm_place).warm - warm >= len(plan) // 2, \
        "the meets were not served by warm workers"
    still_serves(wasm_place)


# ================================================================= forged host-call arguments
#: Host calls with pointers or lengths no agent's memory holds, and what each fails with.
FORGED = {
    "request-outside-memory": (
        "(drop (call $call (i32.const 0x7FFFFFF0) (i32.const 16)))",
        r"request \(16 bytes at 0x7ffffff0\) lies outside its memory of 65,536 bytes"),
    "request-wrapping-past-4-GiB": (
        "(drop (call $call (i32.const 0xFFFFFFF0) (i32.const 0x20)))",
        r"request \(32 bytes at 0xfffffff0\) lies outside its memory of 65,536 bytes"),
    "request-past-the-end": (
        "(drop (call $call (i32.const 65530) (i32.const 16)))",
        r"request \(16 bytes at 0xfffa\) lies outside its memory of 65,536 bytes"),
    "request-of-length-minus-1": (
        "(drop (call $call (i32.const 0) (i32.const -1)))",
        rf"request of 4,294,967,295 bytes is over the largest briefcase of "
        rf"{LARGEST_BRIEFCASE:,}"),
    "reply-outside-memory": (
        f"(drop (call $call (i32.const {REQUESTS_AT}) (i32.const {len(PLACE_REQUEST)})))\n"
        "(drop (call $reply (i32.const 0x7FFFFFF0) (i32.const 64)))",
        r"reply buffer \(64 bytes at 0x7ffffff0\) lies outside its memory of 65,536 bytes"),
    "reply-wrapping-past-4-GiB": (
        f"(drop (call $call (i32.const {REQUESTS_AT}) (i32.const {len(PLACE_REQUEST)})))\n"
        "(drop (call $reply (i32.const 0xFFFFFFF0) (i32.const 0x20)))",
        r"reply buffer \(32 bytes at 0xfffffff0\) lies outside its memory of 65,536 bytes"),
    "reply-of-length-minus-1": (
        f"(drop (call $call (i32.const {REQUESTS_AT}) (i32.const {len(PLACE_REQUEST)})))\n"
        "(drop (call $reply (i32.const 0) (i32.const -1)))",
        r"reply buffer \(4,294,967,295 bytes at 0x0\) lies outside its memory of 65,536"),
    # A frame whose one part says it is 2 GiB long.
    "part-over-the-largest-briefcase": (
        f"(drop (call $call (i32.const {REQUESTS_AT + 64}) (i32.const 8)))",
        rf"sent a part of 2,147,483,647 bytes, over the largest briefcase of "
        rf"{LARGEST_BRIEFCASE:,}"),
}


@pytest.mark.parametrize("forged", FORGED)
def test_forged_pointers_end_the_meet(wasm_place: RunningPlace, forged: str) -> None:
    """A pointer or length outside the agent's memory (out of bounds, wrapping past 2^32,
    -1) for its request or its reply, or a part longer than any briefcase, ends the meet
    as AgentFailed saying which; the worker reads and writes nothing else."""
    body, message = FORGED[forged]
    code = wat_agent(body, {REQUESTS_AT: PLACE_REQUEST,
                            REQUESTS_AT + 64: b"\x00\x00\x00\x01\x7f\xff\xff\xff"})
    with pytest.raises(tacoma.AgentFailed, match=message):
        meet(wasm_place, code)
    still_serves(wasm_place)


def test_a_host_call_without_a_memory_ends_the_meet(wasm_place: RunningPlace) -> None:
    """A module that exports no memory has nowhere to read its request from: AgentFailed."""
    with pytest.raises(tacoma.AgentFailed, match=r'exports no memory named "memory"'):
        meet(wasm_place, """(module
          (import "tacoma" "call" (func $call (param i32 i32) (result i32)))
          (memory 1)
          (func (export "_start") (drop (call $call (i32.const 0) (i32.const 4)))))
        """)
    still_serves(wasm_place)


#: Requests that are not whole, well-formed calls, and a word of the error each gets.
MALFORMED = {
    "count-5-holding-1-part": (b"\x00\x00\x00\x05" + PLACE_REQUEST[4:], "not one whole request"),
    "no-bytes": (b"", "not one whole request"),
    "bytes-after-the-request": (PLACE_REQUEST + b"junk", "not one whole request"),
    "no-parts": (frame([]), "empty request"),
    "unknown-call": (frame([b"frobnicate"]), "unknown call"),
    "call-name-not-utf8": (frame([b"\xff\xfe"]), "utf-8"),
    "handle-99": (frame([b"folder", b"99", b"X"]), "no briefcase with handle 99"),
    "handle-minus-1": (frame([b"folder", b"-1", b"X"]), "no briefcase with handle -1"),
    "free-own-briefcase": (frame([b"free", b"0"]), "cannot be freed"),
    "missing-arguments": (frame([b"append"]), ""),  # any message
    "folder-name-not-utf8": (frame([b"append", b"0", b"\xff", b"x"]), "utf-8"),
    "negative-offset": (frame([b"read", b"0", b"X", b"-5", b"1"]), "at least 0"),
    "log-of-unknown-level": (frame([b"log", b"bogus", b"line"]), "level"),
    "meet-of-no-agent": (frame([b"meet", b"", b"0", b"sync", b"1"]), "agent"),
    "meet-time-not-a-number": (frame([b"meet", b"ag_echo", b"0", b"sync", b"nan"]),
                               "timeout"),
}


@pytest.mark.parametrize("request_name", MALFORMED)
def test_a_malformed_request_gets_an_error_reply(wasm_place: RunningPlace,
                                                 request_name: str) -> None:
    """A request that is not one whole frame (a count its bytes do not hold, bytes after
    it, none at all), or names no call, a handle that does not exist, or arguments the call
    does not take, is answered "error bad-argument ...", which the agent sees (as tacoma.h's
    calls return -1); its next request is answered as ever."""
    request, words = MALFORMED[request_name]
    result = meet(wasm_place, requests_agent(request, PLACE_REQUEST))
    replies = [unframe(reply) for reply in result["R"]]
    assert len(replies) == 2, replies
    assert replies[0][:2] == [b"error", b"bad-argument"] and replies[0][2], replies[0]
    assert words.encode() in replies[0][2].lower(), replies[0]
    assert replies[1] == [b"ok", wasm_place.address.encode()]
    still_serves(wasm_place)


# ========================================================================= output floods
FLOOD = c_agent("""
    int main(void) {
        static char chunk[65536];
        size_t written = 0;
        memset(chunk, 'x', sizeof chunk);
        for (;;) {
            ssize_t n = write(1, chunk, sizeof chunk);
            if (n < 0) {
                int code = errno;
                hold("FULL");
                tc_fail("stdout refused more: %s; written %zu", strerror(code), written);
            }
            written += (size_t)n;
        }
    }
""")


def test_an_output_flood_stops_at_the_file_size_limit(wasm_place: RunningPlace) -> None:
    """Stdout written in 64 KiB chunks without end is refused (EFBIG, "File too large")
    once it holds --file-size bytes: the output file is then exactly that large, and no
    agent's output file at the place is larger; the caller gets the agent's failure."""
    cabinet = f"wasm-flood-{uuid.uuid4().hex}"
    outcome: list[BaseException] = []

    def flood() -> None:
        try:
            meet(wasm_place, FLOOD, CAB=[cabinet])
        except BaseException as exc:  # noqa: BLE001 - the test looks at it
            outcome.append(exc)

    thread = threading.Thread(target=flood, daemon=True)
    thread.start()
    try:
        wait_until(lambda: bool(published(wasm_place, cabinet, "FULL"))
                   or not thread.is_alive(), 30, "the flood to be refused")
        sizes = output_files(wasm_place)
    finally:
        release(wasm_place, cabinet)
        thread.join(60)
        with contextlib.suppress(tacoma.MeetError):
            tacoma.meet(wasm_place.target("ag_cabinet"),
                        {"OP": ["remove"], "CABINET": [cabinet]}, timeout=10)
    assert len(outcome) == 1 and isinstance(outcome[0], tacoma.AgentFailed), outcome
    assert str(outcome[0]) == f"stdout refused more: File too large; written {FILE_SIZE}"
    assert max(sizes.values()) == FILE_SIZE, sizes  # the flood's file, full, and no larger
    still_serves(wasm_place)


LOG_FLOOD = c_agent("""
    int main(void) {
        int lines = atoi(arg("LINES")), size = atoi(arg("SIZE"));
        char *text = malloc((size_t)size + 1);
        if (text == NULL) tc_fail("no memory");
        memset(text, 'x', (size_t)size);
        text[size] = 0;
        for (int i = 0; i < lines; i++) tc_log("warning", "flood %d\\n[forged] %s", i, text);
        tc_append_text(TC_SELF, "OK", "yes");
        return 0;
    }
""")


@pytest.mark.parametrize(("lines", "size"), [(3000, 16), (400, 16384)],
                         ids=["many-short-lines", "long-lines"])
def test_a_log_flood_stops_at_the_meets_budget(wasm_place: RunningPlace, lines: int,
                                               size: int) -> None:
    """tc_log without end writes at most the meet's budget of lines and characters to the
    place's log, each line cut to its longest, with its newlines escaped (no forged line
    of the log), and says how many more it dropped; the meet itself ends well."""
    meet_id = f"wasm-log-{uuid.uuid4().hex[:12]}"
    result = tacoma.meet(wasm_place.target("ag_wasm"),
                         {"LINES": [str(lines)], "SIZE": [str(size)]}, code=LOG_FLOOD,
                         timeout=60, meet_id=meet_id)
    assert result["OK"] == [b"yes"]
    marker = f"[{meet_id}] "
    dropped = "more log lines from the agent were dropped"
    # The place tells of the lines it dropped once the worker's meet is over: when it
    # serves its next (this principal's) meet, or ends.
    assert witnessed(meet(wasm_place, WITNESS_WAT)) == (0, 1, WAT_DATA_BYTES)
    wait_until(lambda: any(marker in line and dropped in line
                           for line in wasm_place.log().splitlines()),
               20, "the place to tell of the lines it dropped")
    log = wasm_place.log().splitlines()
    logged = [line.split(marker, 1)[1] for line in log if f"{marker}flood " in line]
    assert 0 < len(logged) <= LOG_LINES_PER_MEET
    assert sum(len(text) for text in logged) <= LOG_CHARS_PER_MEET + LOG_LINE + 64
    assert all(len(text) <= LOG_LINE + 64 for text in logged)
    assert not any(line.startswith("[forged]") for line in log)
    still_serves(wasm_place)


# =================================================================== what a module may be
#: Modules the place must not run, and the error each gets.
REFUSED_MODULES = {
    "import-env-system": (
        '(module (import "env" "system" (func (param i32) (result i32))) '
        '(memory (export "memory") 1) (func (export "_start")))',
        r"the module imports env\.system, which no place gives"),
    "import-a-host-memory": (
        '(module (import "env" "memory" (memory 1)) (func (export "_start")))',
        r"the module imports env\.memory, which no place gives"),
    "import-a-wasi-call-preview-1-lacks": (
        '(module (import "wasi_snapshot_preview1" "sock_open" '
        '(func (param i32 i32 i32) (result i32))) (func (export "_start")))',
        r"cannot be instantiated: unknown import.*sock_open"),
    "import-tacoma-call-of-another-type": (
        '(module (import "tacoma" "call" (func (param i64) (result i64))) '
        '(func (export "_start")))',
        r"cannot be instantiated"),
    "no-start": (
        '(module (memory (export "memory") 1) (func (export "main")))',
        r"the module exports no _start function"),
    # A start function would run as the module is instantiated, before the meet's limits
    # are watched: a loop, a recursion or a memory bomb there.
    "a-start-function-that-loops": (
        '(module (func $forever (loop $again (br $again))) (start $forever) '
        '(func (export "_start")))',
        r"the module has a start function, which a place does not run"),
    "a-start-function-that-grows-memory": (
        '(module (memory (export "memory") 1) (func $bomb (loop $more (br_if $more '
        '(i32.ne (memory.grow (i32.const 16)) (i32.const -1))))) (start $bomb) '
        '(func (export "_start")))',
        r"the module has a start function, which a place does not run"),
    "start-that-is-no-function": (
        '(module (global (export "_start") i32 (i32.const 0)))',
        r"the module exports no _start function"),
}


@pytest.mark.parametrize("module", REFUSED_MODULES)
def test_a_module_the_place_cannot_run_is_refused(wasm_place: RunningPlace,
                                                 module: str) -> None:
    """An import the place does not give (a host function, a host memory, a WASI call
    outside preview 1, tacoma.call of another type), a start function, or no _start
    function: AgentFailed naming what is wrong, before any of the module runs."""
    code, message = REFUSED_MODULES[module]
    with pytest.raises(tacoma.AgentFailed, match=message):
        meet(wasm_place, code)
    still_serves(wasm_place)


# ===================================================================== building C agents
#: C agents built in a row, each a program of its own (a build of its own).
BUILDS = 12


def test_c_agents_build_within_the_places_limits(wasm_place: RunningPlace) -> None:
    """The build of a C agent runs with the agent's limits (here 256 MiB of address space):
    clang and wasm-ld must fit in them every time, or honest agents fail at random."""
    same_build_in_either_mode(wasm_place)
    failures = []
    for n in range(BUILDS):
        code = (f"/* build {n} {uuid.uuid4().hex} */\n#include <tacoma.h>\n"
                'int main(void) { tc_append_text(TC_SELF, "OK", "yes"); return 0; }\n')
        try:
            assert meet(wasm_place, code)["OK"] == [b"yes"]
        except tacoma.AgentFailed as exc:
            failures.append(str(exc).splitlines()[0])
    assert not failures, f"{len(failures)} of {BUILDS} builds failed: {failures}"
    still_serves(wasm_place)
