"""The sandbox's own parts: host-wide uid blocks, the layer report, the network option.

The attacks themselves, in every language, are in test_hostile.py; the misbehaviour the
limits catch is in test_isolation.py.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import tacoma
from tacoma.agent import _landlock
from tacoma.agent._interpreter import discover_interpreters
from tacoma.agent._plan import (
    Artifacts,
    Landlock,
    Mounts,
    Namespaces,
    Rlimits,
    SandboxPlan,
    View,
    ZygotePlan,
)
from tacoma.agent._sandbox import cgroup_members
from tacoma.place.workers._uids import BASE, BLOCK, AgentUids, _uids_in_use

from conftest import RunningPlace, needs_root, processes_of_uid, wait_until


def run(place: RunningPlace, code: str) -> tacoma.Briefcase:
    return tacoma.meet(place.target("ag_python"), code=textwrap.dedent(code), timeout=60)


# --------------------------------------------------------------------------- uids
def test_places_claim_different_uid_blocks(tmp_path: Path) -> None:
    first, second = AgentUids(tmp_path), AgentUids(tmp_path)
    try:
        assert first.block != second.block
        assert {first.next() for _ in range(3)}.isdisjoint({second.next() for _ in range(3)})
        assert (tmp_path / "uids" / str(first.block)).read_text().split()[0] == str(os.getpid())
    finally:
        first.close()
        second.close()
    assert not list((tmp_path / "uids").iterdir())  # given back


def test_a_dead_places_block_is_taken_over_only_when_no_process_uses_it(tmp_path: Path
                                                                        ) -> None:
    records = tmp_path / "uids"
    records.mkdir(parents=True)
    first = os.getpid() % 2048
    # The block a place of our pid would try first: owned by a process that is gone (a pid
    # with the wrong start time), and the next one by a live place (ourselves, truly).
    (records / str(first)).write_text("999999999 1\n")
    me = Path(f"/proc/{os.getpid()}/stat").read_text()
    started = me[me.rindex(")") + 2:].split()[19]
    (records / str((first + 1) % 2048)).write_text(f"{os.getpid()} {started}\n")
    free = not _uids_in_use(BASE + first * BLOCK, BASE + (first + 1) * BLOCK)
    uids = AgentUids(tmp_path)
    try:
        assert uids.block != (first + 1) % 2048  # never a live place's
        if free:  # (another place of this test run may have agents in that block)
            assert uids.block == first  # the dead owner's block, as nothing runs under it
            assert uids.base == BASE + first * BLOCK
            assert (records / str(first)).read_text().split()[0] == str(os.getpid())
    finally:
        uids.close()


@needs_root
def test_a_block_with_a_live_process_of_a_dead_place_is_not_reused(tmp_path: Path) -> None:
    records = tmp_path / "uids"
    records.mkdir(parents=True)
    first = os.getpid() % 2048
    (records / str(first)).write_text("999999999 1\n")
    squatter = subprocess.Popen(["setpriv", f"--reuid={BASE + first * BLOCK + 7}",
                                 f"--regid={BASE + first * BLOCK + 7}", "--clear-groups",
                                 "sleep", "60"])
    try:
        wait_until(lambda: bool(processes_of_uid(BASE + first * BLOCK + 7)),
                   what="the squatter to run")
        uids = AgentUids(tmp_path)
        try:
            assert uids.block != first
        finally:
            uids.close()
    finally:
        squatter.kill()
        squatter.wait()


@needs_root
def test_two_places_never_share_agent_uids(start_place: Callable[..., RunningPlace]) -> None:
    places = [start_place(), start_place()]
    code = 'import os; bc["UID"] = [str(os.getuid())]'
    uids = [int(run(p, code)["UID"][0]) for p in places]
    blocks = {(uid - BASE) // BLOCK for uid in uids}
    assert len(blocks) == 2, uids
    records = {int(Path(f"/run/tacoma/uids/{b}").read_text().split()[0]) for b in blocks}
    assert records == {p.proc.pid for p in places}


# --------------------------------------------------------------------------- the layers
def test_doctor_reports_every_layer() -> None:
    out = subprocess.run([sys.executable, "-m", "tacoma", "doctor", "--json"],
                         capture_output=True, text=True, timeout=120, check=False)
    layers = {row["layer"]: row for row in json.loads(out.stdout)["layers"]}
    assert set(layers) >= {"uid per agent", "mount namespace", "PID namespace",
                           "network namespace", "Landlock", "seccomp", "cgroup pids",
                           "cgroup memory", "cgroup cpu"}
    for row in layers.values():
        assert row["detail"], row  # applied or not, it says what, or why
    if os.geteuid() == 0:  # this project's machines: every layer applies
        assert all(row["applied"] for row in layers.values()), layers
    text = subprocess.run([sys.executable, "-m", "tacoma", "doctor", "--agent-network",
                           "host"], capture_output=True, text=True, timeout=120,
                          check=False).stdout
    assert "agents have the host's network" in text


@needs_root
def test_the_mount_probe_says_why_in_a_chroot(tmp_path: Path) -> None:
    """In a chroot, / is no mount point: the namespaces unshare, but a zygote's first step
    (making / private) fails with a bare "Invalid argument". The probe tries that step too
    and says why, so the place plans no mount layer instead of failing every agent."""
    from tacoma.place.workers._layers import _CLONE_NEWNS, _PROBE

    root = tmp_path / "root"
    (root / "usr").mkdir(parents=True)
    for link in ("bin", "lib", "lib64"):
        if os.path.islink(f"/{link}"):
            (root / link).symlink_to(os.readlink(f"/{link}"))
    python = "/usr/bin/python3"  # any Python: the probe needs ctypes and json only
    if not os.path.exists(python):
        pytest.skip("no /usr/bin/python3 to run in the chroot")
    script = (f"mount --rbind /usr {root}/usr && "
              f"exec chroot {root} {python} -I -S -c \"$0\" {_CLONE_NEWNS}")
    out = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script,
                          _PROBE], capture_output=True, text=True, timeout=60, check=True)
    answer = json.loads(out.stdout)
    assert answer["ok"] and not answer["error"]
    assert "/ is not a mount point here" in answer["mount"], answer
    assert "mount --bind / /" in answer["mount"]
    # And outside the chroot the same probe finds nothing wrong.
    here = subprocess.run([python, "-I", "-S", "-c", _PROBE, str(_CLONE_NEWNS)],
                          capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(here.stdout) == {"ok": True, "error": "", "mount": ""}


def test_the_place_logs_its_layers(start_place: Callable[..., RunningPlace]) -> None:
    log = start_place(quiet=False).log()
    applied = next(line for line in log.splitlines() if "sandbox layers applied" in line)
    namespaces = ("mount namespace", "network namespace")
    # Without root the namespaces come from a user namespace, which some hosts refuse to
    # ordinary users (a chroot, a sysctl, AppArmor): then the place must say why not.
    userns = os.geteuid() == 0 or subprocess.run(
        ["unshare", "--user", "--net", "true"], capture_output=True, check=False).returncode == 0
    for layer in ("Landlock", "seccomp", *(namespaces if userns else ())):
        assert layer in applied, log
    if os.geteuid() == 0:
        assert "NOT applied" not in log
    elif not userns:
        missing = next(line for line in log.splitlines() if "NOT applied" in line)
        for layer in namespaces:
            assert f"{layer} (" in missing, log


# --------------------------------------------------------------------------- the network
@pytest.fixture
def listener() -> Iterator[tuple[int, list[bytes]]]:
    """A TCP service on loopback that records what connects to it."""
    server = socket.create_server(("127.0.0.1", 0))
    seen: list[bytes] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                seen.append(b"connected")
                conn.sendall(b"hello")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], seen
    server.close()


PROBE_NETWORK = """
    import socket
    try:
        s = socket.create_connection(("127.0.0.1", int(bc.text("PORT")[0])), timeout=5)
        bc["GOT"] = [s.recv(5)]
    except OSError as exc:
        bc["GOT"] = [type(exc).__name__.encode()]
"""


@needs_root
def test_agents_have_no_network_by_default(start_place: Callable[..., RunningPlace],
                                           listener: tuple[int, list[bytes]]) -> None:
    port, seen = listener
    result = tacoma.meet(start_place().target("ag_python"), {"PORT": [str(port)]},
                         code=textwrap.dedent(PROBE_NETWORK), timeout=60)
    assert result["GOT"] != [b"hello"]
    assert seen == []


@needs_root
def test_agent_network_host_gives_agents_the_hosts_network(
        start_place: Callable[..., RunningPlace], listener: tuple[int, list[bytes]]) -> None:
    port, seen = listener
    # --grace 1s: the place ends without waiting for the agent left asleep below.
    place = start_place("--agent-network", "host", "--grace", "1s")
    result = tacoma.meet(place.target("ag_python"), {"PORT": [str(port)]},
                         code=textwrap.dedent(PROBE_NETWORK), timeout=60)
    assert result["GOT"] == [b"hello"]
    assert seen == [b"connected"]
    # tacoma ps says which agents have the host's network.
    tacoma.meet(place.target("ag_python"), code="import time; time.sleep(30)",
                mode="async")
    wait_until(lambda: bool(_ps(place)), what="the agent to run")
    assert {row["network"] for row in _ps(place)} == {"host"}


def _ps(place: RunningPlace) -> list[dict[str, object]]:
    out = subprocess.run([sys.executable, "-m", "tacoma", "ps", place.address, "--json",
                          "--state-dir", str(place.state_dir)],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return list(json.loads(out)["agents"])


def test_agent_network_is_checked() -> None:
    with pytest.raises(ValueError, match="agent_network"):
        tacoma.PlaceSettings(agent_network="everything")


def test_agents_read_the_installation_not_the_places_whole_sys_path(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # A place run as a service from "/" (python -m puts the cwd on sys.path) must not give
    # its agents a rule to read and run everything.
    from tacoma.place.workers._containment import interpreter_paths

    monkeypatch.syspath_prepend("/")
    monkeypatch.syspath_prepend(str(tmp_path))
    paths = interpreter_paths()
    assert "/" not in paths
    assert str(tmp_path) not in paths
    assert sys.base_prefix in paths


# --------------------------------------------------------------------------- cgroups reused
def _join_and_run(group_dir: str, code: str) -> int:
    """Run `code` in a process that joined the cgroups of `group_dir` first; its status."""
    joiner = f"import os\nfor d in {group_dir!r}.split(';'):\n" \
             "    open(os.path.join(d, 'cgroup.procs'), 'w').write(str(os.getpid()))\n"
    return subprocess.run([sys.executable, "-I", "-c", joiner + code], timeout=60,
                          capture_output=True, check=False).returncode


@needs_root
def test_an_emptied_cgroup_serves_the_next_worker_unless_memory_killed_its_agent() -> None:
    """Making and removing a worker's cgroups cost the place a quarter of its CPU per meet:
    an emptied group is kept for the next worker, but not one whose agent the memory limit
    killed (its count of such kills would be read as the next agent's)."""
    import asyncio

    from tacoma.place._settings import Limits
    from tacoma.place.workers._cgroups import Cgroups

    cgroups, missing = Cgroups.available()
    if cgroups is None or "memory" in missing:
        pytest.skip(f"no memory cgroup here: {missing}")
    limits = Limits(memory_bytes=64 * 2**20)
    try:
        group = cgroups.create(limits)
        assert _join_and_run(";".join(group.procs_dirs), "pass") == 0
        asyncio.run(cgroups.destroy(group))
        assert all(d.is_dir() for d in group.dirs.values())  # kept, empty
        again = cgroups.create(limits)
        assert again is group
        assert not again.oom_kills()

        status = _join_and_run(";".join(again.procs_dirs),
                               "x = bytearray(512 * 2**20)\nx[::4096] = b'1' * len(x[::4096])")
        assert status != 0 and again.oom_kills() == 1  # killed by the memory cgroup
        asyncio.run(cgroups.destroy(again))
        assert not any(d.exists() for d in again.dirs.values())  # removed, not kept
        fresh = cgroups.create(limits)
        assert fresh is not again and not fresh.oom_kills()
        asyncio.run(cgroups.destroy(fresh))
    finally:
        cgroups.close()
    assert not any(base.exists() for base in cgroups.bases.values())


@needs_root
def test_a_busy_place_makes_few_cgroups(start_place: Callable[..., RunningPlace]) -> None:
    # A pool that does not grow, and no worker kept warm: counts as below.
    place = start_place("--pool-max", "2", "--reuse", "never")
    token = (place.state_dir / "admin.token").read_text().strip()
    usable = [i for i in discover_interpreters().values() if i.check() is None]

    def pools_full() -> bool:  # every language's 2 workers started (a slow zygote is late)
        pools = tacoma.place_status(place.address, token=token).pools
        return len(pools) == len(usable) and all(pool.ready == pool.size == 2
                                                 for pool in pools)

    from tacoma.place.workers._cgroups import _find_hierarchies

    base = _find_hierarchies()[0]["pids"] / "tacoma" / f"{place.proc.pid}-1"  # its first

    def groups() -> list[Path]:
        return [d for d in base.iterdir() if d.is_dir() and d.name[:1] == "w"]

    def only_ready_workers_hold_groups() -> bool:  # the last meet's worker has left its group
        return pools_full() and sum(bool(cgroup_members(str(d)))
                                    for d in groups()) == 2 * len(usable)

    wait_until(pools_full, 60, "every pool to be full")
    for n in range(12):
        assert tacoma.meet(place.target("ag_python"), code=f'bc["N"] = ["{n}"]')["N"] == [
            str(n).encode()]
        # A worker's group is kept for the next one once its processes are gone; on a
        # loaded machine that can come after the next meet starts, so wait for it here.
        wait_until(only_ready_workers_hold_groups, 60, "the used worker's group to empty")
    made = max(int(d.name[1:]) for d in groups())
    # 4 languages x 2 ready workers, then a replacement for each meet: 20 made without reuse.
    assert 8 <= made <= 12, made


# --------------------------------------------------------------------------- the plan
def _a_plan() -> SandboxPlan:
    """A plan with every field set: every layer, and a worker's and a build's parts."""
    return SandboxPlan(
        workdir="/state/work/python-1", env={"HOME": "/state/work/python-1", "LANG": "C.UTF-8"},
        cgroups=("/sys/fs/cgroup/tacoma/w1",),
        limits=Rlimits(cpu_seconds=30, memory_bytes=1 << 30, file_bytes=1 << 26, open_files=256),
        nproc=64,
        mounts=Mounts(at="/state/work", quota=1 << 28, uid=60001,
                      keep=("/usr/lib/python3", "/state"), proc=True, name="python-1",
                      view=View(covers=(("/root", ("/root/venv",)), ("/state", ())),
                                hide_files=("/etc/tacoma/identity.pem",))),
        userns=True,
        landlock=Landlock(rules=(("/usr", _landlock.RUN),
                                 ("/state/work/python-1", _landlock.WRITE)), deny_tcp=True),
        uid=60001, seccomp=bytes(range(16)), place="127.0.0.1:7707", max_frame=1 << 20,
        prefetch=4, ahead=True, reuse=True,
        artifacts=Artifacts(directory="/state/cache/c", build_id="cc 1"),
        argv=("cc", "-o", "agent", "agent.c"), namespaces=True, parent=1234, parent_pidfd=5,
        fd=6)


def test_a_plan_round_trips_through_its_wire_form() -> None:
    import msgpack

    plan = _a_plan()
    wire = plan.to_wire()
    assert SandboxPlan.from_wire(wire) == plan
    # The transports it takes: msgpack to a zygote, JSON on a build's command line.
    assert SandboxPlan.from_wire(msgpack.unpackb(msgpack.packb(wire, use_bin_type=True),
                                                 raw=False)) == plan
    assert SandboxPlan.from_wire(json.loads(json.dumps(wire))) == plan
    # Where a layer does not apply, and what only some processes need, left out.
    bare = dataclasses.replace(plan, mounts=None, landlock=None, seccomp=None, uid=None,
                               nproc=None, artifacts=None)
    assert SandboxPlan.from_wire(json.loads(json.dumps(bare.to_wire()))) == bare
    optional = {"mounts", "landlock", "ahead", "reuse", "artifacts", "argv", "namespaces",
                "parent", "parent_pidfd", "fd"}
    assert SandboxPlan.from_wire({k: v for k, v in bare.to_wire().items()
                                  if k not in optional}) \
        == dataclasses.replace(bare, ahead=False, reuse=False, argv=(), namespaces=False, parent=0,
                               parent_pidfd=None, fd=-1)
    zygote = ZygotePlan(parent=1234, control_fd=7, namespaces=Namespaces(
        netns=True, pidns=True, userns=False, view=plan.mounts.view if plan.mounts else None))
    assert ZygotePlan.from_wire(json.loads(json.dumps(zygote.to_wire()))) == zygote


def test_a_plan_with_an_unknown_or_missing_key_is_refused_saying_which() -> None:
    wire = _a_plan().to_wire()
    with pytest.raises(ValueError, match=r"sandbox plan: unknown key 'netns' \(the place and"):
        SandboxPlan.from_wire({**wire, "netns": True})
    with pytest.raises(ValueError, match="sandbox plan: missing keys 'limits', 'workdir'"):
        SandboxPlan.from_wire({k: v for k, v in wire.items() if k not in ("limits", "workdir")})
    mounts = {k: v for k, v in wire["mounts"].items() if k != "quota"}
    with pytest.raises(ValueError, match="sandbox plan: mounts: missing key 'quota'"):
        SandboxPlan.from_wire({**wire, "mounts": mounts})
    with pytest.raises(ValueError, match="sandbox plan: uid: expected int or None, got '0'"):
        SandboxPlan.from_wire({**wire, "uid": "0"})
    with pytest.raises(ValueError, match="zygote plan: missing key 'control_fd'"):
        ZygotePlan.from_wire({"parent": 1, "namespaces": {"netns": False, "pidns": False,
                                                          "userns": False}})


def test_a_process_given_a_plan_it_cannot_read_says_why(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    from tacoma.agent._sandbox import plan_from_argv

    wire = {**_a_plan().to_wire(), "sandbox": "none"}
    monkeypatch.setattr(sys, "argv", ["tacoma-agent", json.dumps(wire)])
    with pytest.raises(SystemExit, match="tacoma worker: sandbox plan: unknown key 'sandbox'"):
        plan_from_argv(SandboxPlan.from_wire)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts need root")
@pytest.mark.parametrize("how", ["read_only", "read_only_each"])
def test_what_is_shown_below_tmp_is_read_only_with_the_mounts_below_it(
        tmp_path: Path, how: str) -> None:
    """What an agent is shown below its /tmp is read-only, the mounts below it too (a state
    directory's data and cache are mounts of their own): with mount_setattr, and one mount
    at a time where it cannot be had (before Linux 5.12, or refused by a policy)."""
    script = textwrap.dedent(f"""
        import errno, os, subprocess
        from tacoma.agent import _mounts
        top = {str(tmp_path / "shown")!r}
        os.makedirs(top + "/data")
        subprocess.run(["mount", "-t", "tmpfs", "tmpfs", top], check=True)
        os.makedirs(top + "/data")
        subprocess.run(["mount", "-t", "tmpfs", "tmpfs", top + "/data"], check=True)
        _mounts.{how}(top)
        for path in (top + "/f", top + "/data/f"):
            try:
                open(path, "w")
            except OSError as exc:
                assert exc.errno == errno.EROFS, exc
            else:
                raise AssertionError(path + " is writable")
        print("ok")
    """)
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", sys.executable,
                           "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
