# The proxy, in Python: resident as "proxy" between clients and servers (the Proxy-Server
# and Forwarding patterns of the mobile-agent benchmarks). Clients send it requests; it
# forwards each to the next server of SERVERS (NAME@PLACE, round robin), and answers the
# client with the server's reply, adding VIA. Servers may be at other places, and in any
# language: to a client the proxy is the one service. A request with STOP stops the proxy
# and every server.
#
#   tacoma meet ag_python@PLACE --code examples/proxy/proxy.py \
#       -f SERVERS=upper@HOST:PORT -f SERVERS=count@HOST:PORT --async --timeout 600
import itertools

servers = bc.text("SERVERS")
turn = itertools.cycle(servers)
reside("proxy")
served = 0
while True:
    m = receive()
    if "STOP" in m:
        for server in servers:
            request(server, {"STOP": [b""]}, timeout=10)
        reply(m, {"SERVED": [str(served)]})
        break
    server = next(turn)
    try:
        answer = request(server, {"TEXT": m["TEXT"]}, timeout=30)
    except MeetError as exc:  # a server down: the client hears why
        answer = Briefcase(ERROR=[f"{server}: {exc}"])
    answer["VIA"] = [f"proxy at {place} for {m.text('ENVELOPE')[2]}"]
    reply(m, answer)
    served += 1
bc["SERVED"] = [str(served)]
