# The relay, second leg (Tcl): add to TRAIL, meet the Scheme leg, take its TRAIL back.
bc_append_text TRAIL "tcl at [place]"
set after [meet ag_scheme [dict create CODE [bc_folder SCHEME] C [bc_folder C] \
                                       TRAIL [bc_folder TRAIL]]]
bc_replace TRAIL [dict get $after TRAIL]
