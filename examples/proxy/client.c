/* A client in C: sends each element of TEXT to PROXY as a request; answers in ANSWERS. */
#include <tacoma.h>

int main(void) {
    tc_list proxy, texts;
    if (tc_folder(TC_SELF, "PROXY", &proxy) != 0 || proxy.count != 1)
        tc_fail("PROXY must hold the proxy's NAME@PLACE");
    tc_folder(TC_SELF, "TEXT", &texts);
    for (size_t i = 0; i < texts.count; i++) {
        tc_bc q = tc_new();
        tc_append(q, "TEXT", texts.items[i].data, texts.items[i].len);
        tc_bc answer = tc_request((const char *)proxy.items[0].data, q, 30);
        if (answer == TC_ERROR) tc_fail("request: %s", tc_error());
        tc_list got, by;
        tc_folder(answer, "TEXT", &got);
        tc_folder(answer, "BY", &by);
        tc_append_textf(TC_SELF, "ANSWERS", "'%s' -> '%s' by %s",
                        (const char *)texts.items[i].data,
                        got.count ? (const char *)got.items[0].data : "?",
                        by.count ? (const char *)by.items[0].data : "?");
        tc_list_free(&got);
        tc_list_free(&by);
        tc_free(answer);
        tc_free(q);
    }
    return 0;
}
