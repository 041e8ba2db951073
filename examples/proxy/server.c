/* A server in C: resident as "count"; answers each request with the length of its TEXT.
 * A one-way message with REPLY_TO (forwarded, the Forwarding pattern) is answered by a
 * one-way message straight to REPLY_TO, not through the proxy.
 *   tacoma meet ag_c@PLACE --code examples/proxy/server.c --async --timeout 600 */
#include <string.h>
#include <tacoma.h>

int main(void) {
    if (tc_reside("count") != 0) tc_fail("reside: %s", tc_error());
    for (;;) {
        tc_bc m = tc_receive(-1);
        if (m == TC_ERROR) tc_fail("receive: %s", tc_error());
        if (m == 0) return 0; /* the place stops */
        tc_list stop, text, envelope, reply_to;
        tc_folder(m, "STOP", &stop);
        tc_bc r = tc_new();
        int stopping = stop.count > 0, status = 0;
        if (stopping) {
            status = tc_reply(m, r);
        } else {
            tc_folder(m, "TEXT", &text);
            tc_folder(m, "ENVELOPE", &envelope);
            tc_folder(m, "REPLY_TO", &reply_to);
            tc_append_textf(r, "TEXT", "%zu bytes", text.count ? text.items[0].len : 0);
            tc_append_textf(r, "BY", "count (c) at %s", tc_place());
            if (strcmp((const char *)envelope.items[1].data, "request") == 0) {
                status = tc_reply(m, r);
            } else if (reply_to.count > 0) {
                char id[64];
                status = tc_send((const char *)reply_to.items[0].data, r, id, sizeof id);
            }
            tc_list_free(&text);
            tc_list_free(&envelope);
            tc_list_free(&reply_to);
        }
        if (status != 0) tc_fail("answering: %s", tc_error());
        tc_list_free(&stop);
        tc_free(r);
        tc_free(m);
        if (stopping) return 0;
    }
}
