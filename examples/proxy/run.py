"""Three servers in three languages, a proxy in front of them, and clients in three more
languages, across three local places: the Proxy-Server and Forwarding patterns.

    python examples/proxy/run.py

Place "servers" runs the resident servers upper (Tcl), reverse (Scheme) and count (C);
place "hub" runs the resident proxy (Python); place "clients" runs the clients (Python, Tcl
and C) at once, each sending its texts to proxy@hub as requests (answered through the
proxy), and one more Python client, itself resident, whose one-way messages the proxy
forwards to the servers, which answer it directly. Every message crosses loopback TCP
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

        def forwarded(texts: list[str]) -> list[str]:
            result = tacoma.meet(f"ag_python@{clients}", timeout=120,
                                 briefcase={"PROXY": [f"proxy@{hub}"], "TEXT": texts,
                                            "NAME": ["reader"]},
                                 code=(HERE / "forwarded_client.py").read_text())
            return [f"ag_python (forwarding): {line}" for line in result.text("ANSWERS")]

        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            jobs = [pool.submit(client, "ag_python", "client.py",
                                ["tromsø", "cornell", "agents"]),
                    pool.submit(client, "ag_tcl", "client.tcl",
                                ["briefcase", "folder", "cabinet"]),
                    pool.submit(client, "ag_c", "client.c", ["meet", "place", "go"]),
                    pool.submit(forwarded, ["itinerary", "mailbox", "resident"])]
            for job in jobs:
                print("\n".join(job.result()))
        stopped = tacoma.request(f"proxy@{hub}", {"STOP": [b""]}, timeout=30)
        print(f"the proxy served {stopped.text('SERVED')[0]} requests, forwarded "
              f"{stopped.text('FORWARDED')[0]}, and stopped the servers")

if __name__ == "__main__":
    main()
