/* A first agent in C: greets every name in the NAME folder.
 *
 *   tacoma meet ag_c --code examples/hello/hello.c -f NAME=world
 *
 * The place compiles it once (cached by a hash of the source) and runs the binary; its
 * own briefcase is TC_SELF, and what that holds when main returns 0 comes back. The same
 * source runs as a WebAssembly agent too, each meet in a fresh instance:
 *
 *   tacoma meet ag_wasm --code examples/hello/hello.c -f NAME=world */
#include <tacoma.h>

#ifdef __wasm__
#define LANGUAGE "wasm"
#else
#define LANGUAGE "c"
#endif

int main(void) {
    tc_list names;
    if (tc_folder(TC_SELF, "NAME", &names) != 0)
        tc_fail("cannot read NAME: %s", tc_error());
    for (size_t i = 0; i < names.count; i++)
        tc_append_textf(TC_SELF, "GREETING", "hello, %s from " LANGUAGE,
                        (const char *)names.items[i].data);
    tc_list_free(&names);
    return 0;
}
