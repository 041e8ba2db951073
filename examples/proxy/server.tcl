# A server in Tcl: resident as "upper"; answers each request with its TEXT in capitals.
# A one-way message with REPLY_TO (forwarded, the Forwarding pattern) is answered by a
# one-way message straight to REPLY_TO, not through the proxy.
#   tacoma meet ag_tcl@PLACE --code examples/proxy/server.tcl --async --timeout 600
reside upper
while 1 {
    set m [receive]
    if {$m eq {}} break
    if {[dict exists $m STOP]} { reply $m; break }
    set text [encoding convertfrom utf-8 [lindex [dict get $m TEXT] 0]]
    set answer [dict create TEXT [list [encoding convertto utf-8 [string toupper $text]]] \
                            BY [list "upper (tcl) at [place]"]]
    if {[lindex [dict get $m ENVELOPE] 1] eq "request"} {
        reply $m $answer
    } else {
        send [lindex [dict get $m REPLY_TO] 0] $answer
    }
}
