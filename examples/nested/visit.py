# An agent that meets other agents: the null agent here, and an agent at another place
# if one is named in the folder THERE (HOST:PORT).
#
#   tacoma meet ag_python@127.0.0.1:7707 --code examples/nested/visit.py -f THERE=127.0.0.1:7708
#
# Agents get meet, log, fail, place and Briefcase as globals, beside bc.
echoed = meet("ag_echo", Briefcase(PING=[b"ping"]))
bc["ECHO"] = echoed["PING"]
for there in bc.text("THERE"):
    probe = Briefcase(CODE=["bc['AT'] = [place]\nbc['FOR'] = [principal or 'anonymous']"])
    answer = meet("ag_python@" + there, probe, timeout=30)
    bc.append("VISITED", f"{there}: ran at {answer.text('AT')[0]} "
                         f"for {answer.text('FOR')[0]}")
log("visit done at " + place)
