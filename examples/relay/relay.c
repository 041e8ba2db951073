/* The relay, last leg (C): add to TRAIL; the briefcase then goes back the way it came. */
#include <tacoma.h>

int main(void) {
    if (tc_append_textf(TC_SELF, "TRAIL", "c at %s", tc_place()) != 0)
        tc_fail("%s", tc_error());
    return 0;
}
