# Reads only what it needs of a folder sent by reference (tacoma meet -f DATA=@@FILE):
# its size, and its first 8 bytes (a file's magic number). The rest is never fetched.
bc["SIZE"] = [str(bc.folder_size("DATA"))]
bc["HEAD"] = [bc.read("DATA", 0, 8).hex(" ")]
bc.remove("DATA")  # nothing to send back
