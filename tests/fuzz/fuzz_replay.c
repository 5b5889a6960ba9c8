/* fuzz_replay.c — the replay driver that runs without libFuzzer: every committed corpus file is checked
 * against its expectation (tests/fuzz/corpus/NAME.expect: "FILE RESULT TEXT", RESULT an error name such
 * as XDC_OK or XDC_ERR_CORRUPT, TEXT a substring of the verdict's summary or message), then
 * XDC_FUZZ_MUTATIONS (default 200) seeded mutations of each (byte flips, truncations, splices) go through
 * the target, so `make test` walks the parsers' error paths deterministically. XDC_FUZZ_PRINT_VERDICTS=1
 * prints every file's verdict, to review before writing the line of a new corpus file. */
#include "tests/fuzz/xdc_fuzz.h"

#include "common/xdc_rng.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void mutate(xdc_rng *rng, uint8_t *buf, size_t *len, size_t cap)
{
    switch (xdc_rng_below(rng, 4)) {
    case 0: /* flip a few bytes */
        for (int i = 0; i < 4 && *len; i++) buf[xdc_rng_below(rng, *len)] ^= (uint8_t)(1u << xdc_rng_below(rng, 8));
        break;
    case 1: /* truncate */
        if (*len) *len = xdc_rng_below(rng, *len);
        break;
    case 2: /* duplicate a span */
        if (*len && *len < cap / 2) {
            size_t at = xdc_rng_below(rng, *len), n = xdc_rng_below(rng, *len - at) + 1;
            memmove(buf + at + n, buf + at, *len - at);
            *len += n;
        }
        break;
    default: /* overwrite with an interesting value */
        if (*len >= 4) {
            static const uint32_t vals[] = {0, 0xffffffffu, 0x7fffffffu, 0x80000000u, 1u << 20};
            uint32_t v = vals[xdc_rng_below(rng, 5)];
            memcpy(buf + xdc_rng_below(rng, *len - 3), &v, 4);
        }
    }
}

#define MAX_EXPECT 64

typedef struct expectation {
    char file[128], result[40], text[256];
    int seen;
} expectation;

/* Read NAME.expect: one expectation per line, '#' comments and blank lines skipped. Returns the count. */
static int read_expectations(const char *path, expectation *ex)
{
    FILE *f = fopen(path, "r");
    XDC_ASSERT_MSG(f != NULL, "no expectations file %s (one line per corpus file: FILE RESULT TEXT)", path);
    char line[512];
    int n = 0, lineno = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        line[strcspn(line, "\n")] = '\0';
        if (line[0] == '#' || line[0] == '\0') continue;
        XDC_ASSERT_MSG(n < MAX_EXPECT, "%s: more than %d expectations", path, MAX_EXPECT);
        expectation *e = &ex[n];
        int used = 0;
        XDC_ASSERT_MSG(sscanf(line, "%127s %39s %n", e->file, e->result, &used) == 2, "%s:%d: want FILE RESULT TEXT",
                       path, lineno);
        snprintf(e->text, sizeof e->text, "%s", line + used);
        e->seen = 0;
        n++;
    }
    fclose(f);
    return n;
}

static void check_verdict(const char *path, expectation *e, xdc_fuzz_verdict_fn verdict, const char *data, size_t len)
{
    char summary[512] = "";
    xdc_err_t rc = verdict((const uint8_t *)data, len, summary, sizeof summary);
    XDC_ASSERT_MSG(strcmp(xdc_errname(rc), e->result) == 0, "%s: %s (%s), expected %s", path, xdc_errname(rc), summary,
                   e->result);
    XDC_ASSERT_MSG(strstr(summary, e->text) != NULL, "%s: verdict \"%s\" does not contain \"%s\"", path, summary,
                   e->text);
    e->seen = 1;
}

void xdc_fuzz_replay(const char *name, xdc_fuzz_fn fn, xdc_fuzz_verdict_fn verdict)
{
    char dir[512], expect_path[600];
    snprintf(dir, sizeof dir, "tests/fuzz/corpus/%s", name);
    snprintf(expect_path, sizeof expect_path, "tests/fuzz/corpus/%s.expect", name);
    static expectation ex[MAX_EXPECT];
    int n_expect = read_expectations(expect_path, ex);
    DIR *d = opendir(dir);
    XDC_ASSERT_MSG(d != NULL, "corpus folder %s is missing", dir);
    const char *mv = getenv("XDC_FUZZ_MUTATIONS");
    int mutations = mv ? atoi(mv) : 200;
    int files = 0;
    struct dirent *e;
    xdc_rng rng;
    xdc_rng_seed(&rng, 0x5eed);
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        size_t len;
        char *data = xdc_test_read_file(path, &len);
        XDC_ASSERT_MSG(data != NULL, "cannot read %s", path);
        if (getenv("XDC_FUZZ_PRINT_VERDICTS")) { /* to review when adding a corpus file */
            char summary[512] = "";
            xdc_err_t rc = verdict((const uint8_t *)data, len, summary, sizeof summary);
            printf("VERDICT %s %s %s\n", e->d_name, xdc_errname(rc), summary);
            free(data);
            files++;
            continue;
        }
        expectation *want = NULL;
        for (int i = 0; i < n_expect && !want; i++)
            if (strcmp(ex[i].file, e->d_name) == 0) want = &ex[i];
        XDC_ASSERT_MSG(want != NULL, "%s has no expectation in %s", path, expect_path);
        check_verdict(path, want, verdict, data, len);
        XDC_ASSERT_EQ(fn((const uint8_t *)data, len), 0);
        size_t cap = 2 * len + 64;
        uint8_t *work = malloc(cap);
        for (int m = 0; m < mutations; m++) {
            size_t n = len;
            memcpy(work, data, len);
            for (int k = 0, rounds = 1 + (int)xdc_rng_below(&rng, 3); k < rounds; k++) mutate(&rng, work, &n, cap);
            fn(work, n);
        }
        free(work);
        free(data);
        files++;
    }
    closedir(d);
    XDC_ASSERT_MSG(files > 0, "corpus folder %s is empty", dir);
    for (int i = 0; i < n_expect && !getenv("XDC_FUZZ_PRINT_VERDICTS"); i++)
        XDC_ASSERT_MSG(ex[i].seen, "%s: %s names a file the corpus does not have", expect_path, ex[i].file);
}
