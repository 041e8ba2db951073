"""Resident agents and messages between agents at two real places on loopback.

The resident runs at place B; senders are agents at place A (in every language) and the
Python API. Kinds: one-way (send), acknowledged (send_ack / wait_ack), request/reply.
"""

from __future__ import annotations

import concurrent.futures
import json
import subprocess
import sys
import uuid

import pytest
import tacoma

from conftest import RunningPlace, issue_identity, release, wait_until, waits_for

#: An echo resident in each language: takes messages until a request with STOP; answers
#: requests with ECHO (the DATA folder); counts the one-way and acknowledged ones in TAKEN.
SERVERS = {
    "ag_python": """
reside("echo")
while (m := receive(timeout=60)) is not None:
    if m.text("ENVELOPE")[1] != "request":
        bc.append("TAKEN", m["ENVELOPE"][1])
    elif "STOP" in m:
        reply(m, {"BYE": [b"python"]})
        break
    else:
        reply(m, {"ECHO": m["DATA"], "FROM": [m["ENVELOPE"][2]]})
""",
    "ag_tcl": """
reside echo
while 1 {
    set m [receive 60]
    if {$m eq {}} break
    set envelope [dict get $m ENVELOPE]
    if {[lindex $envelope 1] ne "request"} {
        bc_append TAKEN [lindex $envelope 1]
    } elseif {[dict exists $m STOP]} {
        reply $m [dict create BYE [list tcl]]
        break
    } else {
        reply $m [dict create ECHO [dict get $m DATA] FROM [list [lindex $envelope 2]]]
    }
}
""",
    "ag_scheme": """
(reside "echo")
(let loop ()
  (let ((m (receive 60)))
    (when m
      (let ((envelope (cdr (assoc "ENVELOPE" m))))
        (cond
          ((not (equal? (utf8->string (cadr envelope)) "request"))
           (bc-append "TAKEN" (cadr envelope)) (loop))
          ((assoc "STOP" m) (reply m (list (cons "BYE" (list "scheme")))))
          (else (reply m (list (cons "ECHO" (cdr (assoc "DATA" m)))
                               (cons "FROM" (list (caddr envelope)))))
                (loop)))))))
""",
    "ag_c": """
#include <string.h>
#include <tacoma.h>
int main(void) {
    if (tc_reside("echo") != 0) tc_fail("reside: %s", tc_error());
    for (;;) {
        tc_bc m = tc_receive(60);
        if (m == TC_ERROR) tc_fail("receive: %s", tc_error());
        if (m == 0) break;
        tc_list envelope, stop, data;
        tc_folder(m, "ENVELOPE", &envelope);
        tc_folder(m, "STOP", &stop);
        tc_bc r = tc_new();
        if (strcmp((const char *)envelope.items[1].data, "request") != 0) {
            tc_append(TC_SELF, "TAKEN", envelope.items[1].data, envelope.items[1].len);
        } else if (stop.count > 0) {
            tc_append_text(r, "BYE", "c");
            tc_reply(m, r);
            break;
        } else {
            tc_folder(m, "DATA", &data);
            tc_replace(r, "ECHO", data.items, data.count);
            tc_replace(r, "FROM", envelope.items + 2, 1);
            if (tc_reply(m, r) != 0) tc_fail("reply: %s", tc_error());
            tc_list_free(&data);
        }
        tc_list_free(&envelope);
        tc_list_free(&stop);
        tc_free(r);
        tc_free(m);
    }
    return 0;
}
""",
}

#: A sender in each language, at the other place: a request, an acknowledged message and a
#: one-way one to echo@{B}; it keeps the reply's ECHO, the one-way id, and "ok" once acked.
CLIENTS = {
    "ag_python": """
bc["R"] = request("echo@{B}", Briefcase(DATA=[b"\\0bin"]))["ECHO"]
handle = send_ack("echo@{B}", Briefcase(DATA=[b"a"]))
bc["ID"] = [send("echo@{B}", Briefcase(DATA=[b"w"]))]
wait_ack(handle, 30)
bc["ACK"] = [b"ok"]
""",
    "ag_tcl": """
set r [request echo@{B} [dict create DATA [list [binary format H* 0062696e]]]]
bc_replace R [dict get $r ECHO]
set handle [send_ack echo@{B} [dict create DATA [list a]]]
bc_append_text ID [send echo@{B} [dict create DATA [list w]]]
wait_ack $handle 30
bc_append_text ACK ok
""",
    "ag_scheme": """
(use-modules (rnrs bytevectors))
(bc-replace "R" (cdr (assoc "ECHO" (request "echo@{B}"
                                            (list (cons "DATA" (list #vu8(0 98 105 110))))))))
(define handle (send-ack "echo@{B}" (list (cons "DATA" (list "a")))))
(bc-append "ID" (send "echo@{B}" (list (cons "DATA" (list "w")))))
(wait-ack handle 30)
(bc-append "ACK" "ok")
""",
    "ag_c": """
#include <tacoma.h>
int main(void) {
    tc_bc q = tc_new();
    tc_append(q, "DATA", "\\0bin", 4);
    tc_bc r = tc_request("echo@{B}", q, 30);
    if (r == TC_ERROR) tc_fail("request: %s", tc_error());
    tc_list echo;
    tc_folder(r, "ECHO", &echo);
    tc_replace(TC_SELF, "R", echo.items, echo.count);
    tc_bc a = tc_new();
    tc_append_text(a, "DATA", "a");
    int handle = tc_send_ack("echo@{B}", a);
    if (handle == TC_ERROR) tc_fail("send_ack: %s", tc_error());
    char id[64];
    if (tc_send("echo@{B}", a, id, sizeof id) != 0) tc_fail("send: %s", tc_error());
    tc_append_text(TC_SELF, "ID", id);
    if (tc_wait_ack(handle, 30) != 0) tc_fail("wait_ack: %s", tc_error());
    tc_append_text(TC_SELF, "ACK", "ok");
    return 0;
}
""",
}


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory):
    from conftest import launch_place

    places = [launch_place(tmp_path_factory.mktemp(f"place{i}"), "--mailbox-messages", "3")
              for i in range(2)]
    yield places
    for place in places:
        assert place.stop() == 0, place.log()


def _start_resident(place: RunningPlace, language: str, code: str, name: str = "echo",
                    **folders: list[bytes]) -> concurrent.futures.Future[tacoma.Briefcase]:
    """Run a resident in a sync meet (in a thread); wait until it takes messages."""
    pool = concurrent.futures.ThreadPoolExecutor(1)
    future = pool.submit(tacoma.meet, f"{language}@{place.address}", folders, code=code,
                         timeout=120)
    pool.shutdown(wait=False)

    def resident() -> bool:
        if future.done():
            future.result()  # raises what ended it
        return name in [row["name"] for row in ps(place)]

    wait_until(resident, 60, f"resident {name}")
    return future


@pytest.mark.parametrize("server", sorted(SERVERS))
def test_every_kind_of_message_between_two_places(pair: list[RunningPlace],
                                                  server: str) -> None:
    a, b = pair
    ended = _start_resident(b, server, SERVERS[server])
    reply = tacoma.request(f"echo@{b.address}", {"DATA": [b"from the api"]}, timeout=30)
    assert reply["ECHO"] == [b"from the api"]
    assert reply.text("FROM") == ["client"]
    for language, code in CLIENTS.items():
        result = tacoma.meet(f"{language}@{a.address}", code=code.replace("{B}", b.address),
                             timeout=60)
        assert result["R"] == [b"\0bin"], language
        assert result.text("ID")[0].startswith("echo."), language
        assert result.text("ACK") == ["ok"], language
    assert tacoma.request(f"echo@{b.address}", {"STOP": [b""]})["BYE"] == [
        server.removeprefix("ag_").encode()]
    taken = ended.result(60).text("TAKEN")
    assert sorted(taken) == ["ack"] * 4 + ["oneway"] * 4


def test_a_full_mailbox_is_an_error_for_the_sender(pair: list[RunningPlace]) -> None:
    a, b = pair
    gate = f"gate-{uuid.uuid4().hex[:8]}"  # the resident takes nothing until it opens
    sleeper = 'reside("slow")\n' + waits_for(gate) + 'while receive(0) is not None:\n' \
              '    bc.append("GOT", b"1")'
    ended = _start_resident(b, "ag_python", sleeper, "slow")
    target = f"slow@{b.address}"
    for i in range(3):  # --mailbox-messages 3
        assert tacoma.send(target, {"N": [str(i)]}).startswith("slow.")
    with pytest.raises(tacoma.MailboxFull, match="mailbox of slow is full"):
        tacoma.send(target, {"N": [b"3"]})
    code = f"""
try:
    send({target!r}, Briefcase(N=[b"from an agent"]))
except MailboxFull as exc:
    bc["ERROR"] = [type(exc).__name__]
"""
    assert tacoma.meet(f"ag_python@{a.address}", code=code, timeout=30)["ERROR"] == [
        b"MailboxFull"]
    release(b, gate)
    assert len(ended.result(60)["GOT"]) == 3  # what was accepted was delivered


def test_the_mailbox_bounds_bytes_too(start_place) -> None:
    b = start_place("--mailbox-bytes", "100000")
    gate = f"gate-{uuid.uuid4().hex[:8]}"  # the resident takes nothing until it opens
    ended = _start_resident(b, "ag_python", 'reside("big")\n' + waits_for(gate), "big")
    tacoma.send(f"big@{b.address}", {"X": [b"x" * 60000]})
    with pytest.raises(tacoma.MailboxFull, match="60,00"):
        tacoma.send(f"big@{b.address}", {"X": [b"x" * 60000]})
    release(b, gate)
    ended.result(60)


def test_acknowledgements_are_asynchronous(pair: list[RunningPlace]) -> None:
    _, b = pair
    gate = f"gate-{uuid.uuid4().hex[:8]}"  # the resident takes nothing until it opens
    code = 'reside("late")\n' + waits_for(gate) + 'receive(10)\nreceive(10)'
    ended = _start_resident(b, "ag_python", code, "late")
    first = tacoma.send(f"late@{b.address}", {"N": [b"1"]}, ack=True)
    second = tacoma.send(f"late@{b.address}", {"N": [b"2"]}, ack=True)
    assert isinstance(first, concurrent.futures.Future)
    wait_until(lambda: [r["mailbox"] for r in ps(b) if r["name"] == "late"] == [2], 30,
               "both messages in the resident's mailbox")
    assert not first.done() and not second.done()  # sent and waiting, not yet taken
    release(b, gate)
    assert first.result(30) is None and second.result(30) is None  # acknowledged when taken
    ended.result(60)


def test_a_resident_that_ends_fails_its_waiting_senders(pair: list[RunningPlace]) -> None:
    _, b = pair
    code = 'reside("quitter")\nm = receive(30)'  # takes one request, never replies
    ended = _start_resident(b, "ag_python", code, "quitter")
    with pytest.raises(tacoma.MessageError, match="quitter ended before answering"):
        tacoma.request(f"quitter@{b.address}", {"Q": [b"?"]}, timeout=30)
    ended.result(30)
    with pytest.raises(tacoma.UnknownAgent, match="quitter"):
        tacoma.send(f"quitter@{b.address}", {"Q": [b"?"]})


def test_a_request_not_answered_in_time(pair: list[RunningPlace]) -> None:
    _, b = pair
    gate = f"gate-{uuid.uuid4().hex[:8]}"  # the resident takes nothing until it opens
    ended = _start_resident(b, "ag_python", 'reside("mute")\n' + waits_for(gate), "mute")
    with pytest.raises(tacoma.MeetTimeout):
        tacoma.request(f"mute@{b.address}", {}, timeout=0.5)
    release(b, gate)
    ended.result(30)


@pytest.mark.parametrize(("code", "error"), [
    ('reside("ag_x")', "bad resident name"),
    ('reside("two words")', "bad resident name"),
    ('reside("one")\nreside("two")', "already resident as one"),
    ("receive(0)", "call reside"),
    ('reply(Briefcase(ENVELOPE=[b"x.1", b"request", b"me"]))', "call reside"),
    ('reside("r")\nreply(Briefcase(ENVELOPE=[b"r.99", b"request", b"me"]))',
     "no request r.99"),
])
def test_mailbox_misuse_is_a_typed_error(pair: list[RunningPlace], code: str,
                                         error: str) -> None:
    a, _ = pair
    with pytest.raises(tacoma.AgentFailed, match=f"MessageError: .*{error}"):
        tacoma.meet(f"ag_python@{a.address}", code=code, timeout=30)


def test_two_residents_cannot_share_a_name(pair: list[RunningPlace]) -> None:
    a, _ = pair
    ended = _start_resident(a, "ag_python", 'reside("taken")\nreceive(30)', "taken")
    with pytest.raises(tacoma.AgentFailed, match="already here"):
        tacoma.meet(f"ag_python@{a.address}", code='reside("taken")', timeout=30)
    tacoma.send(f"taken@{a.address}")
    ended.result(30)


def test_clients_cannot_reach_the_mailbox_or_ack_ordinary_agents(
        pair: list[RunningPlace]) -> None:
    a, _ = pair
    with pytest.raises(tacoma.NotAllowed, match="ag_mailbox is met by agents"):
        tacoma.meet(f"ag_mailbox@{a.address}", {"OP": ["receive"]})
    with pytest.raises(ValueError, match="not a resident's"):
        tacoma.send(f"ag_echo@{a.address}", ack=True)
    code = 'h = send_ack("ag_echo")\ntry:\n    wait_ack(h, 10)\nexcept MessageError as exc:\n' \
           '    bc["E"] = [str(exc)]'
    result = tacoma.meet(f"ag_python@{a.address}", code=code, timeout=30)
    assert "not one here" in result.text("E")[0]
    refused = _cli("send", f"ag_echo@{a.address}")
    assert refused.returncode == 2 and "resident agents" in refused.stderr


def test_ps_and_kill(pair: list[RunningPlace]) -> None:
    a, _ = pair
    ended = _start_resident(a, "ag_tcl", "reside victim\nreceive 60", "victim")
    rows = [row for row in ps(a) if row["name"] == "victim"]
    assert len(rows) == 1
    row = rows[0]
    assert row["language"] == "tcl" and row["agent"] == "ag_tcl" and row["pid"] > 0
    assert row["processes"] >= 1 and row["rss"] > 0 and row["age"] >= 0
    assert row["mailbox"] == 0
    table = _cli("ps", a.address, "--state-dir", str(a.state_dir))
    assert "victim" in table.stdout and "MAILBOX" in table.stdout
    killed = _cli("kill", f"victim@{a.address}", "--state-dir", str(a.state_dir))
    assert killed.returncode == 0 and "killed victim" in killed.stdout
    with pytest.raises(tacoma.AgentKilled, match="killed by tacoma kill"):
        ended.result(30)
    assert not [row for row in ps(a) if row["name"] == "victim"]
    gone = _cli("kill", f"victim@{a.address}", "--state-dir", str(a.state_dir))
    assert gone.returncode == 4 and "no agent 'victim'" in gone.stderr


def test_ps_and_kill_need_an_admin_identity_or_the_admin_token(pair: list[RunningPlace],
                                                               tmp_path) -> None:
    a, _ = pair
    token = a.state_dir / "admin.token"
    assert token.stat().st_mode & 0o777 == 0o600
    forged = tmp_path / "forged.token"
    forged.write_text("0" * 64)
    clerk = str(issue_identity("clerk"))  # a client identity without the admin role
    refused = _cli("ps", a.address, "--token-file", str(forged), "--identity", clerk)
    assert refused.returncode == 15 and "NotAllowed" in refused.stderr
    missing = _cli("kill", f"x@{a.address}", "--state-dir", str(tmp_path), "--identity", clerk)
    assert missing.returncode == 15 and "admin role" in missing.stderr
    # The right token still works for anyone; an admin identity needs none.
    assert _cli("ps", a.address, "--state-dir", str(a.state_dir), "--identity", clerk) \
        .returncode == 0
    assert _cli("ps", a.address, "--state-dir", str(tmp_path)).returncode == 0
    # An agent at the place has no token either (its uncaught error fails its meet).
    with pytest.raises(tacoma.AgentFailed, match="NotAllowed"):
        tacoma.meet(f"ag_python@{a.address}", timeout=30,
                    code='meet("ag_admin", Briefcase(OP=["ps"], TOKEN=["guess"]))')


def test_tacoma_send(pair: list[RunningPlace]) -> None:
    _, b = pair
    code = 'reside("cli")\nfor _ in range(3):\n    m = receive(30)\n' \
           '    if m.text("ENVELOPE")[1] == "request":\n        reply(m, {"OUT": m["IN"]})'
    ended = _start_resident(b, "ag_python", code, "cli")
    one_way = _cli("send", f"cli@{b.address}", "-f", "IN=1", "--json")
    assert json.loads(one_way.stdout)["message_id"].startswith("cli.")
    acked = _cli("send", f"cli@{b.address}", "-f", "IN=2", "--ack")
    assert acked.stdout.strip() == "acknowledged"
    reply = _cli("send", f"cli@{b.address}", "-f", "IN=3", "--request", "--json")
    assert json.loads(reply.stdout) == {"folders": {"OUT": ["3"]}}
    ended.result(30)
    unknown = _cli("send", f"nobody@{b.address}", "-f", "IN=1")
    assert unknown.returncode == 4 and "resident agents:" in unknown.stderr


def test_meets_and_messages_in_parallel(shared_place: RunningPlace) -> None:
    """Many senders at once, a resident answering them all, in threads of one client."""
    b = shared_place
    code = ('reside("busy")\nwhile (m := receive(5)) is not None:\n'
            '    reply(m, {"OUT": [m["IN"][0] * 2]})')
    ended = _start_resident(b, "ag_python", code, "busy")
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        replies = list(pool.map(lambda i: tacoma.request(
            f"busy@{b.address}", {"IN": [str(i).encode()]}, timeout=60)["OUT"][0], range(40)))
    assert replies == [str(i).encode() * 2 for i in range(40)]
    ended.result(60)


def ps(place: RunningPlace) -> list[dict[str, object]]:
    out = _cli("ps", place.address, "--state-dir", str(place.state_dir), "--json")
    assert out.returncode == 0, out.stderr
    agents: list[dict[str, object]] = json.loads(out.stdout)["agents"]
    return agents


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tacoma", *args], capture_output=True,
                          text=True, timeout=120)



def test_a_resident_cannot_take_an_installed_agents_name(pair: list[RunningPlace],
                                                         tmp_path) -> None:
    a, _ = pair
    program = tmp_path / "backup.py"
    program.write_text("bc['OK'] = [b'the real one']\n")
    installed = _cli("install", str(program), "--state-dir", str(a.state_dir))
    assert installed.returncode == 0, installed.stderr
    with pytest.raises(tacoma.AgentFailed, match="has an agent named backup"):
        tacoma.meet(f"ag_python@{a.address}", code='reside("backup")', timeout=30)
    assert tacoma.meet(f"backup@{a.address}")["OK"] == [b"the real one"]


def test_replies_keep_every_folder_and_unanswered_requests_are_bounded(
        pair: list[RunningPlace]) -> None:
    _, b = pair
    code = """
reside("hoarder")
first = receive(30)
reply(first, {"NAME": [b"n"], "TIMEOUT": [b"t"], "OP2": [b"o"]})
taken = [receive(30) for _ in range(3)]   # --mailbox-messages 3: that many unanswered
try:
    receive(30)
except MessageError as exc:
    bc["REFUSED"] = [str(exc)]
for message in taken:
    reply(message, {"N": message["N"]})
"""
    ended = _start_resident(b, "ag_python", code, "hoarder")
    target = f"hoarder@{b.address}"
    assert tacoma.request(target, {}, timeout=30) == {"NAME": [b"n"], "TIMEOUT": [b"t"],
                                                      "OP2": [b"o"]}
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        waiting = [pool.submit(tacoma.request, target, {"N": [str(i)]}, timeout=30)
                   for i in range(3)]
        wait_until(lambda: [r["mailbox"] for r in ps(b) if r["name"] == "hoarder"] == [0],
                   30, "the three requests taken")
        fourth = pool.submit(tacoma.request, target, {"N": [b"3"]}, timeout=30)
        assert sorted(f.result(30)["N"][0] for f in waiting) == [b"0", b"1", b"2"]
        with pytest.raises(tacoma.MessageError, match="ended before answering"):
            fourth.result(30)
    assert "reply to some before taking more" in ended.result(30).text("REFUSED")[0]


def test_a_stopping_place_lets_residents_end(start_place) -> None:
    b = start_place()
    code = 'reside("calm")\nwhile receive() is not None:\n    pass\nbc["ENDED"] = ["cleanly"]'
    ended = _start_resident(b, "ag_python", code, "calm")
    b.stop()
    assert ended.result(30).text("ENDED") == ["cleanly"]
