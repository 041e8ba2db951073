# The proxy, in Python: resident as "proxy" between clients and servers, in the two shapes
# of the mobile-agent benchmarks' micro-kernels:
#   - Proxy-Server: a client's *request* goes to the next server of SERVERS (NAME@PLACE,
#     round robin); the server's reply comes back through the proxy, which adds VIA.
#   - Forwarding: a client's *one-way* message carrying REPLY_TO (the client's own
#     NAME@PLACE; the client is a resident too) is passed on to the next server, which
#     answers the client directly: the proxy only redirects.
# Servers may be at other places and in any language. A request with STOP stops the proxy
# and every server.
#
#   tacoma meet ag_python@PLACE --code examples/proxy/proxy.py \
#       -f SERVERS=upper@HOST:PORT -f SERVERS=count@HOST:PORT --async --timeout 600
import itertools

servers = bc.text("SERVERS")
turn = itertools.cycle(servers)
reside("proxy")
served = forwarded = 0
while (m := receive()) is not None:
    kind = m.text("ENVELOPE")[1]
    if "STOP" in m:
        for server in servers:
            request(server, {"STOP": [b""]}, timeout=10)
        reply(m, {"SERVED": [str(served)], "FORWARDED": [str(forwarded)]})
        break
    server = next(turn)
    if kind != "request":  # Forwarding: on to a server, which answers REPLY_TO itself
        send(server, {"TEXT": m["TEXT"], "REPLY_TO": m["REPLY_TO"]})
        forwarded += 1
        continue
    try:
        answer = request(server, {"TEXT": m["TEXT"]}, timeout=30)
    except MeetError as exc:  # a server down: the client hears why
        answer = Briefcase(ERROR=[f"{server}: {exc}"])
    answer["VIA"] = [f"proxy at {place} for {m.text('ENVELOPE')[2]}"]
    reply(m, answer)
    served += 1
bc["SERVED"] = [str(served)]
