/* A server in C: resident as "count"; answers each request with the length of its TEXT.
 *   tacoma meet ag_c@PLACE --code examples/proxy/server.c --async --timeout 600 */
#include <tacoma.h>

int main(void) {
    if (tc_reside("count") != 0) tc_fail("reside: %s", tc_error());
    for (;;) {
        tc_bc m = tc_receive(-1);
        if (m == TC_ERROR || m == 0) tc_fail("receive: %s", tc_error());
        tc_list stop, text;
        tc_folder(m, "STOP", &stop);
        tc_bc r = tc_new();
        int stopping = stop.count > 0;
        if (!stopping) {
            tc_folder(m, "TEXT", &text);
            tc_append_textf(r, "TEXT", "%zu bytes", text.count ? text.items[0].len : 0);
            tc_append_textf(r, "BY", "count (c) at %s", tc_place());
            tc_list_free(&text);
        }
        if (tc_reply(m, r) != 0) tc_fail("reply: %s", tc_error());
        tc_list_free(&stop);
        tc_free(r);
        tc_free(m);
        if (stopping) return 0;
    }
}
