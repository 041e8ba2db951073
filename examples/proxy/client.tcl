# A client in Tcl: sends each element of TEXT to PROXY as a request; answers in ANSWERS.
set proxy [lindex [bc_text PROXY] 0]
foreach text [bc_folder TEXT] {
    set answer [request $proxy [dict create TEXT [list $text]] -timeout 30]
    set got [encoding convertfrom utf-8 [lindex [dict get $answer TEXT] 0]]
    set by [encoding convertfrom utf-8 [lindex [dict get $answer BY] 0]]
    bc_append_text ANSWERS "'[encoding convertfrom utf-8 $text]' -> '$got' by $by"
}
