"""ag_c beyond the conformance suite: compiling, the cache, crashes, and the C call channel."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import tacoma
from tacoma import Briefcase
from tacoma.agent._interpreter import discover_interpreters
from tacoma.wire._program import artifact_key

from conftest import (
    RunningPlace,
    is_root,
    launch_place,
    needs_root,
    processes_of_uid,
    wait_until,
)

C = discover_interpreters().get("ag_c")
pytestmark = pytest.mark.skipif(C is None or C.check() is not None,
                                reason=f"ag_c: {C.check() if C else 'not installed'}")

HELLO = (Path(__file__).parent.parent / "examples" / "hello" / "hello.c").read_text()


@pytest.fixture(scope="module")
def place(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningPlace]:
    # Not quiet: the log's "compiled" lines count the compiles.
    running = launch_place(tmp_path_factory.mktemp("c"), "--cpu-seconds", "5", quiet=False)
    yield running
    assert running.stop() == 0


def meet_c(place: RunningPlace, code: str, **folders: list[bytes]) -> Briefcase:
    return tacoma.meet(place.target("ag_c"), Briefcase(folders), code=code, timeout=60)


def compiles(place: RunningPlace) -> int:
    return place.log().count("compiled a c program")


def cached(place: RunningPlace, code: str) -> Path:
    assert C is not None and C.build is not None
    return (place.state_dir / "cache" / "c" /
            artifact_key(C.build.build_id(), code.encode()))


def test_the_second_meet_with_the_same_source_does_not_compile(place: RunningPlace) -> None:
    code = HELLO + "/* test_the_second_meet */\n"
    before = compiles(place)
    assert meet_c(place, code, NAME=[b"a"]).text("GREETING") == ["hello, a from c"]
    assert compiles(place) == before + 1
    binary = cached(place, code)
    built = binary.stat().st_mtime_ns
    assert meet_c(place, code, NAME=[b"b"]).text("GREETING") == ["hello, b from c"]
    assert compiles(place) == before + 1
    assert binary.stat().st_mtime_ns == built


def test_concurrent_meets_with_a_new_source_compile_it_once(place: RunningPlace) -> None:
    code = HELLO + f"/* concurrent {time.time()} */\n"
    before = compiles(place)

    async def three() -> list[Briefcase | str]:
        return await asyncio.gather(*(
            tacoma.ameet(place.target("ag_c"), {"NAME": [str(i)]}, code=code, timeout=60)
            for i in range(3)))

    results = asyncio.run(three())
    assert sorted(r.text("GREETING")[0] for r in results if isinstance(r, Briefcase)) == [
        "hello, 0 from c", "hello, 1 from c", "hello, 2 from c"]
    assert compiles(place) == before + 1


def test_a_compile_error_returns_the_compilers_messages(place: RunningPlace) -> None:
    code = "#include <tacoma.h>\nint main(void) { return nosuchthing; }\n"
    with pytest.raises(tacoma.AgentFailed, match=r"does not compile: agent\.c:2") as info:
        meet_c(place, code)
    assert "nosuchthing" in info.value.detail
    assert "error:" in info.value.detail
    assert not cached(place, code).exists()
    assert meet_c(place, HELLO, NAME=[b"x"]).text("GREETING") == ["hello, x from c"]


def test_a_segfault_comes_back_with_the_agents_backtrace(place: RunningPlace) -> None:
    code = ("#include <tacoma.h>\n"
            "__attribute__((noinline)) int deref(int *p) { return *p; }\n"
            "int main(void) { printf(\"about to crash\\n\"); fflush(stdout);\n"
            "  printf(\"%d\\n\", deref((int *)8)); return 0; }\n")
    with pytest.raises(tacoma.AgentFailed, match=r"SIGSEGV.*about to crash") as info:
        meet_c(place, code)
    assert "deref at agent.c:2" in info.value.detail
    assert "main at agent.c:4" in info.value.detail


def test_a_nonzero_exit_status_fails_the_meet(place: RunningPlace) -> None:
    code = '#include <tacoma.h>\nint main(void) { puts("giving up"); return 3; }\n'
    with pytest.raises(tacoma.AgentFailed, match="exited with status 3") as info:
        meet_c(place, code)
    assert "giving up" in info.value.detail


def test_misused_calls_are_errors_the_agent_can_read(place: RunningPlace) -> None:
    code = ('#include <tacoma.h>\n'
            'int main(void) {\n'
            '    tc_list l;\n'
            '    if (tc_folder(42, "X", &l) == 0) return 1;\n'
            '    tc_append_text(TC_SELF, "KIND", tc_error_kind());\n'
            '    tc_append_text(TC_SELF, "MESSAGE", tc_error());\n'
            '    if (tc_free(TC_SELF) == 0) return 2;\n'
            '    tc_bc b = tc_new();\n'
            '    if (b == TC_ERROR || tc_free(b) != 0 || tc_free(b) == 0) return 3;\n'
            '    tc_log("warning", "C agent at %s logging", tc_place());\n'
            '    return 0;\n'
            '}\n')
    result = meet_c(place, code)
    assert result.text("KIND") == ["bad-argument"]
    assert result.text("MESSAGE") == ["no briefcase with handle 42"]
    wait_until(lambda: f"C agent at {place.address} logging" in place.log(), what="log")


def test_meets_from_c_pass_whole_briefcases_both_ways(place: RunningPlace) -> None:
    code = ('#include <tacoma.h>\n'
            'int main(void) {\n'
            '    tc_bc b = tc_new();\n'
            '    tc_list in;\n'
            '    tc_folder(TC_SELF, "IN", &in);\n'
            '    tc_replace(b, "CODE", in.items, in.count);\n'
            '    tc_bc r = tc_meet("ag_python", b, 30);\n'
            '    if (r == TC_ERROR) tc_fail("%s: %s", tc_error_kind(), tc_error());\n'
            '    tc_list out;\n'
            '    tc_folder(r, "OUT", &out);\n'
            '    tc_replace(TC_SELF, "OUT", out.items, out.count);\n'
            '    return 0;\n'
            '}\n')
    blob = bytes(range(256)) * 4096
    inner = f"bc['OUT'] = [b'', {blob!r}]".encode()
    result = meet_c(place, code, IN=[inner])
    assert result["OUT"] == [b"", blob]


def test_a_child_left_holding_the_channel_does_not_hold_the_meet(place: RunningPlace
                                                                 ) -> None:
    code = ('#include <stdio.h>\n#include <unistd.h>\n#include <tacoma.h>\n'
            'int main(void) {\n'
            '    pid_t pid = fork();\n'
            '    if (pid == 0) { sleep(60); return 0; }\n'
            '    tc_append_textf(TC_SELF, "UID", "%d", (int)getuid());\n'
            '    return 0;\n'
            '}\n')
    started = time.monotonic()
    result = meet_c(place, code)
    assert time.monotonic() - started < 30  # not the child's 60 s: the meet ended at exit
    if is_root:  # the agent's uid is its own: nothing may run under it once its meet ended
        uid = int(result.text("UID")[0])
        wait_until(lambda: not processes_of_uid(uid), what="the agent's child to be killed")


def test_installed_c_agents_are_met_by_name(place: RunningPlace) -> None:
    (place.state_dir / "agents" / "greeter.c").write_text(HELLO)
    result = tacoma.meet(place.target("greeter"), {"NAME": ["installed"]})
    assert result.text("GREETING") == ["hello, installed from c"]
    assert "CODE" not in result


@needs_root
def test_agents_cannot_change_the_cache(place: RunningPlace) -> None:
    meet_c(place, HELLO, NAME=[b"warm"])
    binary = cached(place, HELLO)
    assert binary.stat().st_uid == 0
    assert oct(binary.stat().st_mode & 0o777) == oct(0o755)
    attack = ("try:\n"
              f"    open({str(binary)!r}, 'r+b').write(b'evil')\n"
              "    bc['RESULT'] = [b'wrote']\n"
              "except OSError as exc:\n"
              "    bc['RESULT'] = [type(exc).__name__.encode()]\n"
              "try:\n"
              f"    __import__('os').listdir({str(binary.parent)!r})\n"
              "    bc['LIST'] = [b'listed']\n"
              "except OSError as exc:\n"
              "    bc['LIST'] = [type(exc).__name__.encode()]\n")
    result = tacoma.meet(place.target("ag_python"), {}, code=attack)
    assert result["RESULT"] == [b"PermissionError"]
    assert result["LIST"] == [b"PermissionError"]
    assert meet_c(place, HELLO, NAME=[b"still"]).text("GREETING") == ["hello, still from c"]


@needs_root
def test_the_compiler_runs_confined_like_an_agent(place: RunningPlace) -> None:
    # /etc/shadow is root's alone: a compiler running as the place (root) could read it.
    assert os.stat("/etc/shadow").st_mode & 0o004 == 0
    code = '#include "/etc/shadow"\nint main(void) { return 0; }\n'
    with pytest.raises(tacoma.AgentFailed, match="does not compile") as info:
        meet_c(place, code)
    assert "Permission denied" in info.value.detail


def test_a_short_timeout_does_not_fail_others_waiting_for_the_same_compile(
        place: RunningPlace) -> None:
    code = HELLO + f"/* shared compile {time.time()} */\n"

    async def both() -> list[object]:
        target = place.target("ag_c")
        return await asyncio.gather(
            tacoma.ameet(target, {"NAME": ["impatient"]}, code=code, timeout=0.05),
            tacoma.ameet(target, {"NAME": ["patient"]}, code=code, timeout=60),
            return_exceptions=True)

    impatient, patient = asyncio.run(both())
    assert isinstance(impatient, tacoma.MeetTimeout)
    assert isinstance(patient, Briefcase)
    assert patient.text("GREETING") == ["hello, patient from c"]


def test_agents_see_no_descriptors_but_their_own(place: RunningPlace) -> None:
    code = ('#include <tacoma.h>\n'
            '#include <dirent.h>\n'
            'int main(void) {\n'
            '    DIR *d = opendir("/proc/self/fd");\n'
            '    struct dirent *e;\n'
            '    while ((e = readdir(d)) != NULL)\n'
            '        if (e->d_name[0] != \'.\' && atoi(e->d_name) != dirfd(d))\n'
            '            tc_append_text(TC_SELF, "FDS", e->d_name);\n'
            '    return 0;\n'
            '}\n')
    fds = sorted(int(fd) for fd in meet_c(place, code).text("FDS"))
    channel = fds[-1]  # TACOMA_FD, the one descriptor beyond stdin, stdout and stderr
    assert fds == [0, 1, 2, channel]
