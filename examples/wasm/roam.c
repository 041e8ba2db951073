/* The roamer in WebAssembly: visits each place of its ITINERARY in turn and comes home with
 * a line from each. At every place it
 *   - asks where it is (tc_place()),
 *   - reads the NOTE folder of the place's "site" cabinet (kept by the place, see
 *     tacoma cabinet),
 *   - counts its hop from the lines it carries already,
 * and adds one line to REPORT. A place it cannot reach goes into SKIPPED, and it goes on.
 *
 * The place builds this source once with clang for wasm32-wasi (cached by a hash of the
 * source) and runs each meet in a fresh instance: nothing but the briefcase (TC_SELF)
 * travels. tc_go_next() ends the instance here, and main() starts again at the next place;
 * when the itinerary is empty it returns 0, main returns, and the briefcase goes home: to
 * whoever made the sync meet that started the trip.
 *
 *   tacoma meet ag_wasm@A --code examples/wasm/roam.c -f ITINERARY=B -f ITINERARY=C
 *
 * (python examples/wasm/run.py starts three local places and does just that.) The same
 * source builds as a C agent too: tacoma meet ag_c@A --code examples/wasm/roam.c ... */
#include <tacoma.h>

#ifdef __wasm__
#define LANGUAGE "wasm"
#else
#define LANGUAGE "c"
#endif

int main(void) {
    tc_list report, notes;
    if (tc_folder(TC_SELF, "REPORT", &report) != 0)
        tc_fail("cannot read REPORT: %s", tc_error());
    size_t hop = report.count + 1;
    tc_list_free(&report);

    /* A place with no "site" cabinet gives an empty folder: a note is a courtesy. */
    if (tc_cabinet_read("site", "NOTE", &notes) != 0)
        tc_fail("cannot read the site cabinet at %s: %s", tc_place(), tc_error());
    const char *note = notes.count > 0 ? (const char *)notes.items[0].data : "(no note)";
    tc_append_textf(TC_SELF, "REPORT", "%zu. %s  note: %s  (" LANGUAGE ")", hop, tc_place(),
                    note);
    tc_list_free(&notes);

    /* tc_go_next returns only if it did not go: 0 when nowhere is left (the trip is
     * over), -1 when the next place could not take the agent (already taken off the
     * itinerary: note it and try the one after). */
    while (tc_go_next() != 0)
        tc_append_textf(TC_SELF, "SKIPPED", "%s", tc_error());
    return 0;
}
