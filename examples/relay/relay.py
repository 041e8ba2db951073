# The relay, first leg (Python): Python meets Tcl, which meets Scheme, which meets C; each
# adds its name to TRAIL, and the whole trail comes back to the caller.
#
#   tacoma meet ag_python --code examples/relay/relay.py -f TCL=@examples/relay/relay.tcl \
#       -f SCHEME=@examples/relay/relay.scm -f C=@examples/relay/relay.c
#
# The next legs' programs travel in the TCL, SCHEME and C folders.
bc.append("TRAIL", f"python at {place}")
after = meet("ag_tcl", Briefcase(CODE=bc["TCL"], SCHEME=bc["SCHEME"], C=bc["C"],
                                 TRAIL=bc["TRAIL"]))
bc["TRAIL"] = after["TRAIL"]
