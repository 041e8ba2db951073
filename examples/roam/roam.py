# The roamer: visits each place of its ITINERARY in turn, reads what is local there, and
# comes home with all of it. At each place it reads
#   - the NOTE folder of the place's "site" cabinet (kept by the place, see tacoma cabinet),
#   - motd.txt in the place's data directory ($TACOMA_DATA, the place's STATE/data),
#   - the host's load average,
# and adds one line to REPORT. A place it cannot reach goes into SKIPPED, and it goes on.
# When the itinerary is empty the agent ends, and its briefcase goes home: to whoever made
# the sync meet that started the trip.
#
#   tacoma meet ag_python@HOME --code examples/roam/roam.py -f ITINERARY=B -f ITINERARY=C
#
# (examples/roam/run.py starts three local places and does just that.)
import os

notes = cabinet_read("site", "NOTE")
try:
    with open(os.path.join(os.environ["TACOMA_DATA"], "motd.txt")) as f:
        motd = f.read().strip()
except OSError as exc:
    motd = f"(no motd.txt: {exc.strerror})"
load = os.getloadavg()[0]
note = notes[0].decode() if notes else "(no note)"
bc.append("REPORT", f"{place}  note: {note}  motd: {motd}  load: {load:.2f}")

while True:
    try:
        if not go_next():  # moved on: the program starts again at the next place
            break  # nowhere left to go: end here, and the briefcase goes home
    except PlaceUnavailable as exc:  # that place is down: skip it
        bc.append("SKIPPED", str(exc))
