# A first agent: greets every name in the NAME folder.
#
#   tacoma meet ag_python --code examples/hello/hello.py -f NAME=world
#
# The briefcase is the global `bc`; what it holds when the program ends comes back.
for name in bc["NAME"]:
    bc.append("GREETING", "hello, " + name.decode() + " from python")
