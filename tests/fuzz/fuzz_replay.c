/* fuzz_replay.c — the replay driver that runs without libFuzzer: every committed corpus file, then
 * XDC_FUZZ_MUTATIONS (default 200) seeded mutations of each (byte flips, truncations, splices), so
 * `make test` walks the parsers' error paths deterministically. */
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

void xdc_fuzz_replay(const char *name, xdc_fuzz_fn fn)
{
    char dir[512];
    snprintf(dir, sizeof dir, "tests/fuzz/corpus/%s", name);
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
}
