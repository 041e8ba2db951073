# An agent that meets other agents: the null agent here, and, at another place named in the
# folder THERE (HOST:PORT), a copy of itself, which says where it ran and for whom.
#
#   tacoma meet ag_python@127.0.0.1:7707 --code examples/nested/visit.py -f THERE=127.0.0.1:7708
#
# Agents get meet, log, fail, place, principal and Briefcase as globals, beside bc. The copy
# runs at the other place for you: it carries its passport, which you signed for this very
# program (a program of another's would need `tacoma meet --program FILE`).
if "PROBE" in bc:  # the copy, at the other place
    bc["AT"] = [place]
    bc["FOR"] = [principal or "anonymous"]
else:
    echoed = meet("ag_echo", Briefcase(PING=[b"ping"]))
    bc["ECHO"] = echoed["PING"]
    for there in bc.text("THERE"):
        answer = meet("ag_python@" + there, Briefcase(CODE=bc["CODE"], PROBE=[b"1"]),
                      timeout=30)
        bc.append("VISITED", f"{there}: ran at {answer.text('AT')[0]} "
                             f"for {answer.text('FOR')[0]}")
    log("visit done at " + place)
