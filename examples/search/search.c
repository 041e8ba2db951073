/* search.py's agent in C: the lines of the place's data files (below $TACOMA_DATA/DIR) that
 * match PATTERN with at most ERRORS edits, found as agrep finds them: a line holding one of
 * the pattern's ERRORS+1 pieces unchanged (memmem) goes through the shift-and automaton
 * with k errors (Wu and Manber). Folders in and out as search.py's: PATTERN, ERRORS, DIR,
 * MAX, LIMIT in; MATCHES ("FILE:LINE:TEXT"), SCANNED, FILES, CPU out. */
#define _GNU_SOURCE
#include <ftw.h>
#include <stdint.h>
#include <tacoma.h>
#include <time.h>

static const unsigned char *pattern;
static size_t m, errors = 1, most = 1000, found, files;
static long long limit = -1, scanned;
static size_t root_length;
static uint64_t masks[256];

static int approximate(const unsigned char *text, size_t n) {
    uint64_t r[9], accept = (uint64_t)1 << (m - 1);
    for (size_t d = 0; d <= errors; d++) r[d] = ((uint64_t)1 << d) - 1;
    for (size_t i = 0; i < n; i++) {
        uint64_t mask = masks[text[i]], before = r[0];
        r[0] = ((r[0] << 1) | 1) & mask;
        for (size_t d = 1; d <= errors; d++) {
            uint64_t was = r[d];
            r[d] = (((was << 1) | 1) & mask) | ((before << 1) | 1) | before |
                   ((r[d - 1] << 1) | 1);
            before = was;
        }
        if (r[errors] & accept) return 1;
    }
    return 0;
}

static int holds_a_piece(const unsigned char *line, size_t n) {
    size_t count = errors + 1, size = m / count;
    for (size_t i = 0; i < count; i++) {
        size_t length = i < count - 1 ? size : m - i * size;
        if (memmem(line, n, pattern + i * size, length) != NULL) return 1;
    }
    return 0;
}

static void scan(const unsigned char *data, size_t n, const char *name) {
    size_t number = 0;
    for (size_t start = 0; start <= n && found < most;) {
        const unsigned char *end = memchr(data + start, '\n', n - start);
        size_t length = end ? (size_t)(end - data) - start : n - start;
        number++;
        if (holds_a_piece(data + start, length) && approximate(data + start, length)) {
            tc_append_textf(TC_SELF, "MATCHES", "%s:%zu:%.*s", name, number, (int)length,
                            (const char *)data + start);
            found++;
        }
        if (!end) break;
        start += length + 1;
    }
}

static int visit(const char *path, const struct stat *st, int kind, struct FTW *ftw) {
    (void)ftw;
    if (kind != FTW_F) return 0;
    FILE *file = fopen(path, "rb");
    if (file == NULL) tc_fail("cannot open %s", path);
    size_t want = (size_t)st->st_size;
    if (limit >= 0 && (long long)want > limit - scanned) want = (size_t)(limit - scanned);
    unsigned char *data = malloc(want + 1);
    size_t got = fread(data, 1, want, file);
    fclose(file);
    scan(data, got, path + root_length + 1);
    free(data);
    scanned += (long long)got;
    files++;
    return found >= most || (limit >= 0 && scanned >= limit);
}

static const char *text_of(const char *folder, const char *otherwise) {
    static tc_list list;  /* kept: the text is used after this returns */
    tc_list got;
    if (tc_text(TC_SELF, folder, &got) != 0 || got.count == 0) return otherwise;
    list = got;
    return (const char *)list.items[0].data;
}

int main(void) {
    tc_list in;
    if (tc_folder(TC_SELF, "PATTERN", &in) != 0 || in.count != 1) tc_fail("no PATTERN");
    pattern = in.items[0].data;
    m = in.items[0].len;
    errors = strtoul(text_of("ERRORS", "1"), NULL, 10);
    most = strtoul(text_of("MAX", "1000"), NULL, 10);
    limit = strtoll(text_of("LIMIT", "-1"), NULL, 10);
    if (errors > 8 || m <= errors || m > 63)
        tc_fail("a pattern of 1 to 63 bytes, longer than ERRORS (0 to 8)");
    for (size_t i = 0; i < m; i++) masks[pattern[i]] |= (uint64_t)1 << i;
    char root[4096];
    const char *data = getenv("TACOMA_DATA");
    snprintf(root, sizeof root, "%s/%s", data ? data : ".", text_of("DIR", "."));
    root_length = strlen(root);
    clock_t started = clock();
    if (nftw(root, visit, 16, FTW_PHYS) < 0) tc_fail("cannot read %s", root);
    tc_append_textf(TC_SELF, "SCANNED", "%lld", scanned);
    tc_append_textf(TC_SELF, "FILES", "%zu", files);
    tc_append_textf(TC_SELF, "CPU", "%.6f", (double)(clock() - started) / CLOCKS_PER_SEC);
    return 0;
}
