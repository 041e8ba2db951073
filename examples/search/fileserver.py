"""A file-serving agent: the other way to search, fetching the data to the client.

OP=list: NAMES and SIZES of the files below $TACOMA_DATA/DIR (DIR "." unless given);
OP=read: DATA, the bytes of each file named in NAME (relative to DIR), in order.
fetch.py meets it in batches and scans what it gets with search.py's own functions.
"""

import os

root = os.path.realpath(os.path.join(os.environ["TACOMA_DATA"],
                                     bc.text("DIR")[0] if bc.folder("DIR") else "."))
op = bc.text("OP")[0]
if op == "list":
    names, sizes = [], []
    for directory, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(directory, name)
            names.append(os.path.relpath(path, root))
            sizes.append(str(os.path.getsize(path)))
    bc["NAMES"], bc["SIZES"] = names, sizes
elif op == "read":
    data = []
    for name in bc.text("NAME"):
        path = os.path.realpath(os.path.join(root, name))
        if not path.startswith(root + os.sep):
            fail(f"{name} is not below the data directory")
        with open(path, "rb") as file:
            data.append(file.read())
    bc["DATA"] = data
    bc.remove("NAME")
else:
    fail(f"OP is list or read, got {op}")
