"""Agents against the trust layer: an agent, in any language, is a hostile local process.

It must not be able to take the place's or its user's identity (the keys are 0600 in a 0700
directory, and an agent runs under a uid of its own), nor meet its own place as a client
over the network without one (the place refuses a connection that shows no certificate).
As root only: a place not run as root runs agents under its own user, who owns the keys
(the sandbox's filesystem layer is what will close that).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import tacoma
from tacoma.client import current_principal

from conftest import RunningPlace

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0,
                                 reason="agents get a uid of their own only as root")]

#: Each language's agent: try to read the file named in folder KEY, and to connect to the
#: place's port given in folder PORT and read its first bytes; report each as RESULT lines.
PROBES = {
    "ag_python": """
import socket
try:
    open(bc.text("KEY")[0], "rb").read(); bc.append("RESULT", "read the key")
except OSError as exc:
    bc.append("RESULT", "key: " + type(exc).__name__)
try:
    s = socket.create_connection(("127.0.0.1", int(bc.text("PORT")[0])), timeout=10)
    s.sendall(bytes.fromhex(bc.text("HELLO")[0]))
    got = s.recv(100)
    bc.append("RESULT", "place said " + got.hex() if got else "closed")
except OSError as exc:
    bc.append("RESULT", "closed")
""",
    "ag_tcl": """
if {[catch {set f [open [lindex [bc_text KEY] 0] r]; read $f; close $f}]} {
    bc_append_text RESULT "key: denied"
} else { bc_append_text RESULT "read the key" }
""",
    "ag_scheme": """
(catch #t
  (lambda () (call-with-input-file (car (bc-text "KEY")) (lambda (p) (read-char p)))
             (bc-append "RESULT" "read the key"))
  (lambda args (bc-append "RESULT" "key: denied")))
""",
    "ag_c": """
#include <stdio.h>
#include <tacoma.h>
int main(void) {
    tc_list key;
    FILE *f = tc_text(TC_SELF, "KEY", &key) == 0 && key.count
        ? fopen((const char *)key.items[0].data, "rb") : NULL;
    tc_append_text(TC_SELF, "RESULT", f ? "read the key" : "key: denied");
    if (f) fclose(f);
    return 0;
}
""",
}


@pytest.mark.parametrize("agent", sorted(PROBES))
def test_an_agent_cannot_take_an_identity_nor_meet_its_place_without_one(
        shared_place: RunningPlace, agent: str) -> None:
    place = shared_place
    trust = Path(os.environ["TACOMA_TRUST_DIR"])
    key = trust / "identities" / f"{current_principal()}.pem"
    assert key.exists()
    port = place.address.rsplit(":", 1)[1]
    from tacoma.wire._events import Hello, Role, encode

    body = encode(Hello(3, Role.CLIENT, 2**20, "agent"))
    hello = (len(body).to_bytes(4, "big") + body).hex()
    result = tacoma.meet(place.target(agent), {"KEY": [str(key)], "PORT": [port],
                                               "HELLO": [hello]},
                         code=PROBES[agent], timeout=60)
    results = result.text("RESULT")
    assert "read the key" not in results
    assert any(r.startswith("key:") for r in results), results
    if agent == "ag_python":  # the place answers a certificate-less connection with nothing
        assert "closed" in results, results
    assert tacoma.meet(place.target("ag_echo"), {"OK": [b"1"]}) == {"OK": [b"1"]}
