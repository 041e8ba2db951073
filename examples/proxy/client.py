# A client in Python: sends each element of TEXT to PROXY (NAME@PLACE) as a request and
# keeps the answers in ANSWERS.
for text in bc["TEXT"]:
    answer = request(bc.text("PROXY")[0], {"TEXT": [text]}, timeout=30)
    bc.append("ANSWERS", f"{text.decode()!r} -> {answer.text('TEXT')[0]!r} "
                         f"by {answer.text('BY')[0]}")
