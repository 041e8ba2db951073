# A resident echo, in Python: stays at its place as "echo" and answers every request with
# the folders it was sent (all but the ENVELOPE the place adds). One-way and acknowledged
# messages are counted and otherwise dropped. It ends when it is killed
# (`tacoma kill echo@PLACE`), its meet's timeout passes, or its place stops.
#
#   tacoma meet ag_python@PLACE --code examples/echo/echo.py --async --timeout 3600
#   tacoma send echo@PLACE -f TEXT=hello --request
reside("echo")
taken = 0
while (m := receive()) is not None:
    taken += 1
    if m.text("ENVELOPE")[1] == "request":
        reply(m, {name: m[name] for name in m if name != "ENVELOPE"})
bc["TAKEN"] = [str(taken)]
