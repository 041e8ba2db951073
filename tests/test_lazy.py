"""Lazy folders (wire._lazy, place.stores._lazy, client._lazy): folders that travel by reference
and are fetched, by chunks, only where and as far as an agent reads them; in every
language, for agents that move, and with the errors a reader meets (origin gone, data
expired, a forged reference, another principal's data)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import msgpack
import pytest
import tacoma
from tacoma.client import _lazy as client_lazy
from tacoma.wire._briefcase import LAZY, Briefcase
from tacoma.wire._lazy import Lazy, Manifest, Ref, Source

from conftest import LAZY_READER, RunningPlace, SharedPlaces, issue_identity, settled

LANGUAGES = ("ag_python", "ag_tcl", "ag_scheme", "ag_c", "ag_wasm")
CHUNK = 64 * 1024


# ------------------------------------------------------------------------ the data format
def fetcher(source: Source, calls: list[tuple[int, int]]) -> Callable[..., tuple[bytes | None,
                                                                              list[bytes]]]:
    def fetch(ref: Ref, first: int, count: int, manifest: bool) -> tuple[bytes | None,
                                                                          list[bytes]]:
        calls.append((first, count))
        return (source.manifest.pack() if manifest else None), source.read(first, count)
    return fetch


def test_a_range_fetches_only_its_chunks_and_one_more() -> None:
    data = os.urandom(10 * CHUNK + 123)
    source = Source([data[:5000], data[5000:]])
    lazy, calls = Lazy(source.ref("DATA", "p:1", "id")), []
    fetch = fetcher(source, calls)
    assert lazy.read(fetch, 3 * CHUNK + 10, 100, prefetch=1) == data[3 * CHUNK + 10:][:100]
    assert calls == [(3, 2)]  # its chunk, and one prefetched
    assert lazy.read(fetch, 4 * CHUNK + 5, 10, prefetch=1) == data[4 * CHUNK + 5:][:10]
    assert calls == [(3, 2)]  # the prefetched chunk was there
    assert lazy.read(fetch, 10 * CHUNK, 10_000, prefetch=3) == data[10 * CHUNK:]
    assert calls[-1] == (10, 1)  # no chunk after the last
    assert lazy.elements(fetch) == [data[:5000], data[5000:]]
    assert lazy.fetched == len(data)


def test_a_changed_chunk_or_manifest_is_refused() -> None:
    source = Source([os.urandom(3 * CHUNK)])
    ref = source.ref("DATA", "p:1", "id")

    def tampered(ref: Ref, first: int, count: int, manifest: bool) -> tuple[bytes | None,
                                                                             list[bytes]]:
        chunks = source.read(first, count)
        chunks[0] = bytes([chunks[0][0] ^ 1]) + chunks[0][1:]
        return source.manifest.pack(), chunks

    with pytest.raises(tacoma.LazyFolderError, match="chunk 1 does not match its hash"):
        Lazy(ref).read(tampered, CHUNK, 10)
    other = Source([os.urandom(3 * CHUNK)])
    with pytest.raises(tacoma.LazyFolderError, match="manifest does not match"):
        Lazy(ref).read(lambda *_: (other.manifest.pack(), other.read(0, 2)), 0, 10)
    with pytest.raises(tacoma.LazyFolderError, match="manifest does not match"):
        Manifest.of(ref, b"\x92\x90\xc4\x00")


def test_a_lazy_folder_travels_as_its_reference() -> None:
    source = Source([b"a" * 100, b"b" * 50])
    bc = Briefcase(X=[b"1"])
    bc["DATA"] = Lazy(source.ref("", "p:1", "id"), source)
    wire = bc.to_wire()
    assert wire["DATA"] == [] and len(wire[LAZY]) == 1
    back = Briefcase.from_wire(wire)
    assert back.is_lazy("DATA") and back.folders() == ["X", "DATA"]
    assert back.folder_size("DATA") == 150 and back.size() == 151
    assert "DATA=<lazy: 150 B in 2 elements at p:1>" in repr(back)
    copy = back.copy()
    assert copy.is_lazy("DATA") and copy == back
    # Read whole where the data is, it still travels by reference while unchanged...
    assert bc["DATA"] == [b"a" * 100, b"b" * 50] and LAZY in bc.to_wire()
    assert Briefcase(bc).is_lazy("DATA")
    # ...and as data once changed.
    bc["DATA"].append(b"c")
    assert not bc.is_lazy("DATA") and bc.to_wire()["DATA"][-1] == b"c"
    assert LAZY not in bc.to_wire()


def test_nothing_outside_an_agent_reads_a_reference_it_cannot_fetch() -> None:
    source = Source([b"x" * 10])
    back = Briefcase.from_wire(Briefcase(DATA=Lazy(source.ref("", "p:1", "id"))).to_wire())
    with pytest.raises(tacoma.LazyFolderError, match="nothing here can fetch it"):
        back.folder("DATA")
    assert back.remove("DATA") == [] and not back.is_lazy("DATA")


@pytest.mark.parametrize("wire", [
    {"DATA": [], LAZY: [b"junk"]},
    {LAZY: [Ref("DATA", "p:1", "id", 1, 1, CHUNK, b"\0" * 32).pack()]},
    {"DATA": [b"x"], LAZY: [Ref("DATA", "p:1", "id", 1, 1, CHUNK, b"\0" * 32).pack()]},
    {"DATA": [], LAZY: [Ref("DATA", "p:1", "id", 1, 1, 0, b"\0" * 32).pack()]},
    {"DATA": [], LAZY: [msgpack.packb(["DATA", "p:1", "id", -1, 1, CHUNK, b"\0" * 32])]},
])
def test_a_malformed_reference_is_a_bad_frame(wire: dict[str, list[bytes]]) -> None:
    with pytest.raises(ValueError, match=r"lazy folder|LAZY element"):
        Briefcase.from_wire(wire)


def test_the_reference_folder_is_reserved() -> None:
    with pytest.raises(ValueError, match="reserved"):
        Briefcase({LAZY: [b"mine"]}).to_wire()


def test_a_folder_the_system_reads_cannot_be_lazy() -> None:
    """A place reads TRACE, CODE, ITINERARY...: as references they would make it fetch."""
    ref = Source([b"x"]).ref("TRACE", "p:1", "id")
    with pytest.raises(ValueError, match="TRACE cannot be lazy"):
        Briefcase.from_wire({"TRACE": [], LAZY: [ref.pack()]})
    with pytest.raises(ValueError, match="CODE cannot be lazy"):
        Briefcase(CODE=Lazy(ref))


def test_asking_and_copying_do_not_fetch() -> None:
    source = Source([b"a" * 10, b"", b""])  # empty elements too: 3 elements of 10 bytes
    back = Briefcase.from_wire(Briefcase(DATA=Lazy(source.ref("", "p:1", "id"))).to_wire())
    assert "DATA" in back and back.folder_size("DATA") == 10  # nothing fetched (it cannot)
    swapped = back.swapped("X", "Y", [])
    swapped.remove("DATA")
    assert back.is_lazy("DATA")  # the swapped briefcase's changes are its own
    both = Briefcase(back, MORE=[b"1"])
    assert both.is_lazy("DATA") and both["MORE"] == [b"1"]
    assert back != {"DATA": []}  # a reference is not an empty folder


# ------------------------------------------------------------------- at places, in every language
READ_RANGE = {
    "ag_python": 'bc["SIZE"] = [str(bc.folder_size("DATA"))]\n'
                 'bc["MID"] = [bc.read("DATA", 300000, 10)]\n',
    "ag_tcl": "bc_append_text SIZE [bc_folder_size DATA]\n"
              "bc_append MID [bc_read DATA 300000 10]\n",
    "ag_scheme": '(bc-append "SIZE" (number->string (bc-folder-size "DATA")))\n'
                 '(bc-append "MID" (bc-read "DATA" 300000 10))\n',
    "ag_c": textwrap.dedent("""
        #include <tacoma.h>
        int main(void) {
            tc_list mid;
            long long size = tc_folder_size(TC_SELF, "DATA");
            if (size < 0) tc_fail("%s", tc_error());
            tc_append_textf(TC_SELF, "SIZE", "%lld", size);
            if (tc_read(TC_SELF, "DATA", 300000, 10, &mid) != 0) tc_fail("%s", tc_error());
            tc_append(TC_SELF, "MID", mid.items[0].data, mid.items[0].len);
            tc_list_free(&mid);
            return 0;
        }
    """),
}

#: Makes DATA (200,000 bytes of 0123456789...) lazy, goes to NEXT, and reads there.
LAZY_AND_GO = {
    "ag_python": textwrap.dedent("""
        if not bc.folder("STEP"):
            bc["DATA"] = [b"0123456789" * 20000]
            bc.lazy("DATA")
            bc["STEP"] = [b"1"]
            go(bc.text("NEXT")[0])
        bc["MID"] = [bc.read("DATA", 100003, 7)]
        bc["SIZE"] = [str(bc.folder_size("DATA"))]
    """),
    "ag_tcl": textwrap.dedent("""
        if {[llength [bc_folder STEP]] == 0} {
            bc_append_text DATA [string repeat 0123456789 20000]
            bc_lazy DATA
            bc_append_text STEP 1
            go [lindex [bc_text NEXT] 0]
        }
        bc_append MID [bc_read DATA 100003 7]
        bc_append_text SIZE [bc_folder_size DATA]
    """),
    "ag_scheme": textwrap.dedent("""
        (when (null? (bc-folder "STEP"))
          (bc-append "DATA" (string->utf8 (apply string-append (make-list 20000 "0123456789"))))
          (bc-lazy "DATA")
          (bc-append "STEP" "1")
          (go (car (bc-text "NEXT"))))
        (bc-append "MID" (bc-read "DATA" 100003 7))
        (bc-append "SIZE" (number->string (bc-folder-size "DATA")))
    """),
    "ag_c": textwrap.dedent("""
        #include <tacoma.h>
        int main(void) {
            tc_list step, next, mid;
            if (tc_folder(TC_SELF, "STEP", &step) != 0) tc_fail("%s", tc_error());
            if (step.count == 0) {
                size_t n = 200000;
                unsigned char *data = malloc(n);
                for (size_t i = 0; i < n; i++) data[i] = (unsigned char)('0' + i % 10);
                tc_append(TC_SELF, "DATA", data, n);
                free(data);
                if (tc_lazy(TC_SELF, "DATA") != 0) tc_fail("%s", tc_error());
                tc_append_text(TC_SELF, "STEP", "1");
                if (tc_text(TC_SELF, "NEXT", &next) != 0) tc_fail("%s", tc_error());
                tc_go((const char *)next.items[0].data);
                tc_fail("go: %s", tc_error());
            }
            if (tc_read(TC_SELF, "DATA", 100003, 7, &mid) != 0) tc_fail("%s", tc_error());
            tc_append(TC_SELF, "MID", mid.items[0].data, mid.items[0].len);
            tc_append_textf(TC_SELF, "SIZE", "%lld", tc_folder_size(TC_SELF, "DATA"));
            return 0;
        }
    """),
}

# A WebAssembly agent is the C agent, built for WebAssembly: the same source.
for _agents in (READ_RANGE, LAZY_AND_GO):
    _agents["ag_wasm"] = _agents["ag_c"]


@pytest.fixture
def two(shared_places: SharedPlaces) -> Iterator[tuple[RunningPlace, RunningPlace]]:
    """Two places with default settings, shared with the other tests of this worker
    (conftest.SharedPlaces): the data here is each test's own, and its counts are the
    client's, taken before and after."""
    a, b = shared_places[0], shared_places[1]
    yield a, b
    settled(a)
    settled(b)


@pytest.mark.parametrize("agent", LANGUAGES)
def test_an_agent_fetches_only_the_range_it_reads(two: tuple[RunningPlace, RunningPlace],
                                                  agent: str) -> None:
    data = os.urandom(4_000_000)
    before = dict(client_lazy.served)
    result = tacoma.meet(two[0].target(agent), {"DATA": tacoma.lazy(data)},
                         code=READ_RANGE[agent], timeout=120)
    assert result.text("SIZE") == ["4000000"]
    assert result["MID"] == [data[300000:300010]]
    fetches = client_lazy.served["fetches"] - before["fetches"]
    moved = client_lazy.served["bytes"] - before["bytes"]
    # One fetch: the chunk with the range, one prefetched, and the manifest (2 KB here).
    assert fetches == 1 and 2 * CHUNK < moved < 2 * CHUNK + 4096
    assert result.is_lazy("DATA")  # still a reference on the way back


def test_an_agent_that_does_not_read_fetches_nothing(two: tuple[RunningPlace,
                                                                RunningPlace]) -> None:
    before = dict(client_lazy.served)
    result = tacoma.meet(two[0].target("ag_python"), {"DATA": tacoma.lazy(os.urandom(10**7))},
                         code='bc["SEEN"] = sorted(bc.folders())', timeout=60)
    assert result.text("SEEN") == ["CODE", "DATA"]  # it is there, and LAZY is not
    assert client_lazy.served == before


def test_a_whole_read_checks_every_chunk(two: tuple[RunningPlace, RunningPlace],
                                         tmp_path: Path) -> None:
    path = tmp_path / "big.bin"
    path.write_bytes(os.urandom(1_500_000))
    result = tacoma.meet(two[0].target("ag_python"), {"DATA": tacoma.lazy(path)},
                         code='import hashlib\n'
                              'bc["SHA"] = [hashlib.sha256(bc["DATA"][0]).hexdigest()]',
                         timeout=60)
    assert result.text("SHA") == [hashlib.sha256(path.read_bytes()).hexdigest()]


@pytest.mark.parametrize("agent", LANGUAGES)
def test_a_moving_agent_takes_the_reference_not_the_data(
        two: tuple[RunningPlace, RunningPlace], agent: str) -> None:
    a, b = two
    result = tacoma.meet(a.target(agent), {"NEXT": [b.address]}, code=LAZY_AND_GO[agent],
                         timeout=120)
    assert result["MID"] == [b"3456789"] and result.text("SIZE") == ["200000"]
    ref = {r.name: r for r in result.lazy_refs()}["DATA"]
    assert ref.origin == a.address and ref.size == 200000  # kept at A, read from B


def test_a_client_lazy_file_goes_on_with_a_moving_agent(
        two: tuple[RunningPlace, RunningPlace], tmp_path: Path) -> None:
    """The client's data, relayed by the first place to the agent at the second."""
    a, b = two
    path = tmp_path / "data.bin"
    path.write_bytes(os.urandom(700_000))
    program = textwrap.dedent(f"""
        bc.append("READ", bc.read("DATA", 600000, 5))
        if len(bc["READ"]) == 1:
            go("{b.address}")
    """)
    result = tacoma.meet(a.target("ag_python"), {"DATA": tacoma.lazy(path)}, code=program,
                         timeout=60)
    assert result["READ"] == [path.read_bytes()[600000:600005]] * 2


@pytest.mark.parametrize("agent", LANGUAGES)
def test_an_origin_that_is_gone_is_an_error_the_agent_can_catch(
        start_place: Callable[..., RunningPlace], shared_place: RunningPlace,
        agent: str) -> None:
    a, b = start_place(), shared_place  # a is stopped: the test's own
    made = tacoma.meet(a.target("ag_python"), code='bc["DATA"] = [b"x" * 1000]\n'
                                                    'bc.lazy("DATA")', timeout=60)
    assert made.is_lazy("DATA")
    assert a.stop() == 0
    made.remove("CODE")
    result = tacoma.meet(b.target(agent), made, code=LAZY_READER[agent], timeout=120)
    (error,) = result.text("ERR")
    assert error.startswith("lazy-folder: ") and f"origin {a.address} cannot be reached" in error
    assert tacoma.meet(b.target("ag_echo"), {"OK": ["1"]})["OK"] == [b"1"]  # b goes on


def test_kept_data_expires(start_place: Callable[..., RunningPlace]) -> None:
    place = start_place("--lazy-seconds", "1s")
    made = tacoma.meet(place.target("ag_python"), code='bc["DATA"] = [b"x" * 10]\n'
                                                        'bc.lazy("DATA")', timeout=60)
    made.remove("CODE")
    again = tacoma.meet(place.target("ag_python"), made, code=LAZY_READER["ag_python"],
                        timeout=60)
    assert again["GOT"] == [b"xxxx"]
    time.sleep(1.2)
    again = tacoma.meet(place.target("ag_python"), made, code=LAZY_READER["ag_python"],
                        timeout=60)
    assert "no longer holds its data" in again.text("ERR")[0]


#: Makes A lazy (60 kB), then tries B (60 kB more), saying in ERR why it could not.
KEEP_TWO = textwrap.dedent("""
    bc["A"] = [b"x" * 60000]
    bc.lazy("A")
    bc["B"] = [b"y" * 60000]
    try:
        bc.lazy("B")
    except LimitExceeded as exc:
        bc["ERR"] = [str(exc)]
""")


@pytest.mark.parametrize(("flags", "says"), [
    (("--lazy-bytes", "100k", "--share", "1"), "keeps at most 102,400 bytes of lazy folders"),
    # Each kept folder costs its data, its elements' places and its record; no principal
    # may hold more than --share of --lazy-bytes.
    (("--lazy-bytes", "400k", "--share", "0.25"), "which lets any one principal keep 102,400"),
])
def test_a_place_keeps_no_more_than_lazy_bytes_nor_a_principal_its_share(
        start_place: Callable[..., RunningPlace], flags: tuple[str, ...], says: str) -> None:
    place = start_place(*flags)
    result = tacoma.meet(place.target("ag_python"), code=KEEP_TWO, timeout=60)
    assert result.is_lazy("A") and not result.is_lazy("B")
    assert says in result.text("ERR")[0]


def forged(bc: Briefcase, name: str, **changes: object) -> Briefcase:
    ref = {r.name: r for r in bc.lazy_refs()}[name]
    fields = {f: getattr(ref, f) for f in ("name", "origin", "id", "size", "count", "chunk",
                                             "root")}
    fields.update(changes)
    wire = bc.to_wire()
    wire[LAZY] = [Ref(**fields).pack()]  # type: ignore[arg-type]
    wire.pop("CODE", None)
    return Briefcase.from_wire(wire)


def test_a_forged_reference_is_refused(two: tuple[RunningPlace, RunningPlace]) -> None:
    a, _ = two
    made = tacoma.meet(a.target("ag_python"), code='bc["DATA"] = [b"x" * 1000]\n'
                                                    'bc.lazy("DATA")', timeout=60)
    for changes, expected in (({"root": b"\1" * 32}, "hash or layout is not that"),
                              ({"id": "0" * 32}, "no longer holds its data"),
                              ({"size": 2000}, "hash or layout is not that"),
                              ({"chunk": 1}, "hash or layout is not that")):
        result = tacoma.meet(a.target("ag_python"), forged(made, "DATA", **changes),
                             code=LAZY_READER["ag_python"], timeout=60)
        assert expected in result.text("ERR")[0], (changes, result)


def test_another_principals_data_is_not_theirs_to_read(
        two: tuple[RunningPlace, RunningPlace]) -> None:
    a, _ = two
    made = tacoma.meet(a.target("ag_python"), code='bc["DATA"] = [b"secret" * 100]\n'
                                                    'bc.lazy("DATA")', timeout=60)
    packed = made.to_wire()[LAZY][0]
    other = issue_identity("lazy-other")
    program = ('try:\n    bc.read("DATA", 0, 6)\nexcept NotAllowed as exc:\n'
               '    bc["ERR"] = [str(exc)]\n')
    script = textwrap.dedent(f"""
        import tacoma
        tacoma.use_identity({str(other)!r})
        ref = bytes.fromhex({packed.hex()!r})
        try:  # straight to ag_lazy, and through an agent of its own
            tacoma.meet({a.target('ag_lazy')!r}, {{"OP": ["fetch"], "REF": [ref],
                        "FIRST": ["0"], "COUNT": ["1"]}}, timeout=60)
        except tacoma.MeetError as exc:
            print(type(exc).__name__, exc)
        bc = tacoma.Briefcase.from_wire({{"DATA": [], "LAZY": [ref]}})
        out = tacoma.meet({a.target('ag_python')!r}, bc, timeout=60, code={program!r})
        print(out.text("ERR")[0])
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, check=False)
    lines = out.stdout.splitlines()
    assert len(lines) == 2, out
    assert lines[0].startswith("NotAllowed lazy folder DATA: its data at") and \
        "is not lazy-other's to read" in lines[0]
    assert "is not lazy-other's to read" in lines[1]


def test_only_an_agent_here_may_keep_data_or_fetch_elsewhere(
        two: tuple[RunningPlace, RunningPlace]) -> None:
    """A client cannot store data at a place, nor make it connect to another (which would
    pass by the --allow rules: ag_lazy answers to its own)."""
    with pytest.raises(tacoma.NotAllowed, match="keeps data for the agents at this place"):
        tacoma.meet(two[0].target("ag_lazy"), {"OP": ["keep"], "NAME": ["X"], "DATA": ["1"]})
    ref = Ref("DATA", two[1].address, "0" * 32, 10, 1, CHUNK, b"\0" * 32)
    with pytest.raises(tacoma.NotAllowed, match="for the agents at this place only"):
        tacoma.meet(two[0].target("ag_lazy"), {"OP": ["fetch"], "REF": [ref.pack()],
                                                "FIRST": ["0"], "COUNT": ["1"]})


def test_a_client_that_is_gone_is_an_error(two: tuple[RunningPlace, RunningPlace],
                                          tmp_path: Path) -> None:
    """An async meet's client exits: its lazy folder went with it."""
    a, _ = two
    path = tmp_path / "data.bin"
    path.write_bytes(b"z" * 1000)
    program = tmp_path / "late.py"
    program.write_text("import time\ntime.sleep(1.5)\n" + LAZY_READER["ag_python"])
    out = subprocess.run([sys.executable, "-m", "tacoma", "meet", a.target("ag_python"),
                          "--code", str(program), "-f", f"DATA=@@{path}", "--async"],
                         capture_output=True, text=True, timeout=60, check=True)
    meet_id = out.stdout.split()[-1]
    result = tacoma.result(f"{meet_id}@{a.address}", wait=30)
    assert "lazy-folder: " in result.text("ERR")[0] and "is gone" in result.text("ERR")[0]


def test_the_cli_sends_a_file_by_reference(two: tuple[RunningPlace, RunningPlace],
                                           tmp_path: Path) -> None:
    path = tmp_path / "data.bin"
    path.write_bytes(os.urandom(300_000))
    program = tmp_path / "size.py"
    program.write_text('bc["N"] = [str(bc.folder_size("DATA"))]\nbc.remove("DATA")\n')
    out = subprocess.run([sys.executable, "-m", "tacoma", "meet", two[0].target("ag_python"),
                          "--code", str(program), "-f", f"DATA=@@{path}", "--json"],
                         capture_output=True, text=True, timeout=60, check=True)
    assert '"300000"' in out.stdout
    bad = subprocess.run([sys.executable, "-m", "tacoma", "meet", two[0].target("ag_python"),
                          "--code", str(program), "-f", f"DATA=@@{tmp_path / 'none'}"],
                         capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 2 and "cannot read" in bad.stderr


@pytest.mark.parametrize(("prefetch", "fetches"), [(0, 8), (1, 4), (3, 2)])
def test_prefetch_sets_how_many_chunks_come_with_each(
        start_place: Callable[..., RunningPlace], shared_place: RunningPlace, prefetch: int,
        fetches: int) -> None:
    """Accent's prefetch, per place: a sequential scan of 8 chunks, one at a time. (1 is
    the default: the shared place's.)"""
    place = shared_place if prefetch == 1 else start_place("--prefetch", str(prefetch))
    data = os.urandom(8 * CHUNK)
    before = client_lazy.served["fetches"]
    result = tacoma.meet(place.target("ag_python"), {"DATA": tacoma.lazy(data)}, timeout=60,
                         code=f'bc["OK"] = [str(b"".join(bc.read("DATA", i * {CHUNK}, {CHUNK}) '
                              f'for i in range(8)) == bc.read("DATA", 0))]')
    assert result.text("OK") == ["True"]
    assert client_lazy.served["fetches"] - before == fetches


def test_the_cli_refuses_a_lazy_folder_the_system_reads(tmp_path: Path) -> None:
    path = tmp_path / "x.bin"
    path.write_bytes(b"x")
    done = subprocess.run([sys.executable, "-m", "tacoma", "meet", "ag_echo",
                           "-f", f"ITINERARY=@@{path}"], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 2 and "ITINERARY cannot be lazy" in done.stderr
