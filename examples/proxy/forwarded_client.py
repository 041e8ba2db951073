# A client of the Forwarding pattern, in Python: resident itself as NAME, it sends each
# element of TEXT to PROXY one-way, with REPLY_TO naming itself, and takes the servers'
# answers as they come, straight from them, into ANSWERS.
me = f"{bc.text('NAME')[0]}@{place}"
reside(bc.text("NAME")[0])
for text in bc["TEXT"]:
    send(bc.text("PROXY")[0], {"TEXT": [text], "REPLY_TO": [me]})
for _ in bc["TEXT"]:
    answer = receive(timeout=30)
    if answer is None:
        fail("a forwarded request was not answered within 30 s")
    bc.append("ANSWERS", f"-> {answer.text('TEXT')[0]!r} by {answer.text('BY')[0]} "
                         f"(forwarded; sent straight back)")
