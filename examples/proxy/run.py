"""Three servers in three languages, a proxy in front of them, and clients in three more
languages, across three local places.

    python examples/proxy/run.py

Place "servers" runs the resident servers upper (Tcl), reverse (Scheme) and count (C);
place "hub" runs the resident proxy (Python); place "clients" runs the clients (Python, Tcl
and C) at once, each sending its texts to proxy@hub. Every message crosses loopback TCP
between real `tacoma place` processes.
"""

from __future__ import annotations

import concurrent.futures
import json
import time
from pathlib import Path

import tacoma

HERE = Path(__file__).parent


def residents(places: tacoma.LocalPlaces, index: int) -> set[str]:
    """The names of the resident agents at a place (as `tacoma ps` lists them)."""
    answer = tacoma.meet(f"ag_admin@{places.addresses[index]}",
                         {"OP": ["ps"], "TOKEN": [places.admin_token(index)]})
    return {json.loads(row)["name"] for row in answer["AGENTS"]} - {""}


def wait_for(names: set[str], places: tacoma.LocalPlaces, index: int) -> None:
    address = places.addresses[index]
    deadline = time.monotonic() + 60
    while not names <= residents(places, index):
        if time.monotonic() > deadline:
            raise SystemExit(f"residents {names} did not start at {address}")
        time.sleep(0.1)


def main() -> None:
    with tacoma.local_places(3) as places:
        servers, hub, clients = places.addresses
        for language, program in (("ag_tcl", "server.tcl"), ("ag_scheme", "server.scm"),
                                  ("ag_c", "server.c")):
            tacoma.meet(f"{language}@{servers}", code=(HERE / program).read_text(),
                        mode="async", timeout=600)
        wait_for({"upper", "reverse", "count"}, places, 0)
        tacoma.meet(f"ag_python@{hub}", mode="async", timeout=600,
                    briefcase={"SERVERS": [f"{name}@{servers}"
                                           for name in ("upper", "reverse", "count")]},
                    code=(HERE / "proxy.py").read_text())
        wait_for({"proxy"}, places, 1)
        print(f"servers at {servers}, proxy at {hub}, clients at {clients}")

        def client(language: str, program: str, texts: list[str]) -> list[str]:
            result = tacoma.meet(f"{language}@{clients}", timeout=120,
                                 briefcase={"PROXY": [f"proxy@{hub}"], "TEXT": texts},
                                 code=(HERE / program).read_text())
            return [f"{language}: {line}" for line in result.text("ANSWERS")]

        jobs = [("ag_python", "client.py", ["tromsø", "cornell", "agents"]),
                ("ag_tcl", "client.tcl", ["briefcase", "folder", "cabinet"]),
                ("ag_c", "client.c", ["meet", "place", "go"])]
        with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
            for lines in pool.map(lambda job: client(*job), jobs):
                print("\n".join(lines))
        served = tacoma.request(f"proxy@{hub}", {"STOP": [b""]}, timeout=30)
        print(f"the proxy served {served.text('SERVED')[0]} requests and stopped "
              "the servers")


if __name__ == "__main__":
    main()
