/* A first agent in C: greets every name in the NAME folder.
 *
 *   tacoma meet ag_c --code examples/hello/hello.c -f NAME=world
 *
 * The place compiles it once (cached by a hash of the source) and runs the binary; its
 * own briefcase is TC_SELF, and what that holds when main returns 0 comes back. */
#include <tacoma.h>

int main(void) {
    tc_list names;
    if (tc_folder(TC_SELF, "NAME", &names) != 0)
        tc_fail("cannot read NAME: %s", tc_error());
    for (size_t i = 0; i < names.count; i++)
        tc_append_textf(TC_SELF, "GREETING", "hello, %s from c",
                        (const char *)names.items[i].data);
    tc_list_free(&names);
    return 0;
}
