# A server in Tcl: resident as "upper"; answers each request with its TEXT in capitals.
#   tacoma meet ag_tcl@PLACE --code examples/proxy/server.tcl --async --timeout 600
reside upper
while 1 {
    set m [receive]
    if {[dict exists $m STOP]} { reply $m; break }
    set text [encoding convertfrom utf-8 [lindex [dict get $m TEXT] 0]]
    reply $m [dict create TEXT [list [encoding convertto utf-8 [string toupper $text]]] \
                          BY [list "upper (tcl) at [place]"]]
}
