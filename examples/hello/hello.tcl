# A first Tcl agent: greets every name in the NAME folder.
#
#   tacoma meet ag_tcl --code examples/hello/hello.tcl -f NAME=world
#
# Folder elements are byte arrays; bc_text and bc_append_text convert from and to UTF-8.
foreach name [bc_text NAME] {
    bc_append_text GREETING "hello, $name from tcl"
}
