/* sync_standalone.c — build/xdc_sync_standalone: the hierarchical sync used as a library on its own,
 * linked against libxdc_sync and what it stands on (intra, wan, compression, kernels, common) and
 * nothing of the orchestrator, model, scheduler, topology or config layers.
 *
 * Two "regions" run in two threads of this process, each with its own WAN engine (TLS 1.3 over
 * loopback, certificates made here by a throw-away CA) and its own sync engine. They all-reduce the
 * same buffers for several rounds with int8 + error feedback (or the codec given), readiness arriving in
 * pieces from the end as backward would produce it, and every round's result on both sides must be
 * bit-identical to a serial reference: per bucket, each region's shard encoded by its own codec context
 * (the error-feedback residual carried from round to round), every encoding decoded and summed in
 * region order, scaled by 1/2. Prints one line and exits 0 when everything matched, 1 otherwise.
 *
 *   xdc_sync_standalone [--elems N] [--bucket N] [--rounds N] [--codec NAME] */
#include "common/xdc_err.h"
#include "common/xdc_rng.h"
#include "compression/xdc_codec.h"
#include "sync/xdc_sync.h"
#include "wan/xdc_wan.h"
#include "wan/xdc_wan_certs.h"

#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N_REGIONS 2

static size_t n_elems = 70464, bucket_elems = 16384;
static int rounds = 8;
static xdc_codec_cfg codec;

static void fill(float *x, int region, int round)
{
    xdc_rng r;
    xdc_rng_seed(&r, (uint64_t)(region * 1000 + round + 1));
    for (size_t i = 0; i < n_elems; i++) x[i] = xdc_rng_normal(&r) * (1.0f + (float)(i % 7));
}

typedef struct {
    int region;
    xdc_wan_engine *wan;
    xdc_wan_peer *peers[N_REGIONS];
    xdc_sync_engine *eng;
    xdc_sync *sync;
    float *got; /* (rounds, n_elems) */
    xdc_err_t rc;
    char why[600];
} side;

static void *side_main(void *arg)
{
    side *s = arg;
    xdc_rng pace;
    xdc_rng_seed(&pace, (uint64_t)s->region + 7);
    for (int round = 0; round < rounds; round++) {
        float *buf = s->got + (size_t)round * n_elems;
        fill(buf, s->region, round);
        if ((s->rc = xdc_sync_begin(s->sync, buf)) != XDC_OK) break;
        for (size_t from = n_elems; from > 0;) { /* each side with its own pace */
            size_t step = 1 + (size_t)xdc_rng_below(&pace, n_elems / 3);
            from = from > step ? from - step : 0;
            xdc_sync_mark_ready(s->sync, from);
            for (int y = (int)xdc_rng_below(&pace, 20); y > 0; y--) sched_yield();
        }
        xdc_diag d = {{0}};
        if ((s->rc = xdc_sync_end(s->sync, &d)) != XDC_OK) {
            snprintf(s->why, sizeof s->why, "round %d: %s", round, d.msg);
            break;
        }
    }
    return NULL;
}

/* The sync's arithmetic written out serially: ref = (rounds, n_elems). */
static int reference(float *ref, char *why, size_t cap)
{
    size_t n_buckets = (n_elems + bucket_elems - 1) / bucket_elems;
    xdc_codec *ctx[N_REGIONS][64] = {{NULL}};
    size_t bound = 0;
    if (n_buckets > 64) {
        snprintf(why, cap, "reference: at most 64 buckets");
        return -1;
    }
    xdc_diag d = {{0}};
    for (int r = 0; r < N_REGIONS; r++)
        for (size_t k = 0; k < n_buckets; k++) {
            size_t len = n_elems - k * bucket_elems < bucket_elems ? n_elems - k * bucket_elems : bucket_elems;
            xdc_codec_cfg cc = codec;
            cc.n_elems = len;
            if (cc.chunk_elems > len) cc.chunk_elems = len;
            if (xdc_codec_create(&cc, &ctx[r][k], &d) != XDC_OK) {
                snprintf(why, cap, "reference codec: %s", d.msg);
                return -1;
            }
            size_t b = xdc_codec_bound(ctx[r][k], len);
            if (b > bound) bound = b;
        }
    uint8_t *enc[N_REGIONS];
    size_t enc_len[N_REGIONS];
    float *x[N_REGIONS];
    for (int r = 0; r < N_REGIONS; r++) {
        enc[r] = malloc(bound);
        x[r] = malloc(n_elems * sizeof(float));
    }
    int bad = 0;
    for (int round = 0; round < rounds && !bad; round++) {
        float *y = ref + (size_t)round * n_elems;
        for (int r = 0; r < N_REGIONS; r++) fill(x[r], r, round);
        for (size_t k = 0; k < n_buckets && !bad; k++) {
            size_t lo = k * bucket_elems, len = n_elems - lo < bucket_elems ? n_elems - lo : bucket_elems;
            for (int r = 0; r < N_REGIONS && !bad; r++)
                bad = xdc_codec_encode(ctx[r][k], x[r] + lo, len, enc[r], bound, &enc_len[r], &d) != XDC_OK;
            memset(y + lo, 0, len * sizeof(float));
            for (int r = 0; r < N_REGIONS && !bad; r++) /* region order */
                bad = xdc_codec_decode(ctx[0][k], enc[r], enc_len[r], y + lo, len, XDC_CODEC_ACCUMULATE, &d) != XDC_OK;
            float inv = 1.0f / (float)N_REGIONS;
            for (size_t i = 0; i < len; i++) y[lo + i] *= inv;
        }
    }
    if (bad) snprintf(why, cap, "reference: %s", d.msg);
    for (int r = 0; r < N_REGIONS; r++) {
        free(enc[r]);
        free(x[r]);
        for (size_t k = 0; k < n_buckets; k++) xdc_codec_destroy(ctx[r][k]);
    }
    return bad ? -1 : 0;
}

static int fail(const char *what, xdc_err_t rc, const xdc_diag *d)
{
    fprintf(stderr, "xdc_sync_standalone: %s: %s: %s\n", what, xdc_errname(rc), d ? d->msg : "");
    return 1;
}

static void remove_dir(const char *dir)
{
    DIR *dh = opendir(dir);
    if (!dh) return;
    char path[700];
    for (struct dirent *e; (e = readdir(dh));) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(dh);
    rmdir(dir);
}

int main(int argc, char **argv)
{
    const char *codec_name = "int8";
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && strcmp(argv[i], "--elems") == 0) n_elems = strtoul(argv[++i], NULL, 10);
        else if (i + 1 < argc && strcmp(argv[i], "--bucket") == 0) bucket_elems = strtoul(argv[++i], NULL, 10);
        else if (i + 1 < argc && strcmp(argv[i], "--rounds") == 0) rounds = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--codec") == 0) codec_name = argv[++i];
        else {
            fprintf(stderr, "usage: xdc_sync_standalone [--elems N] [--bucket N] [--rounds N] [--codec NAME]\n");
            return 64;
        }
    }
    xdc_diag d = {{0}};
    codec = (xdc_codec_cfg)XDC_CODEC_CFG_INIT;
    xdc_err_t rc = xdc_codec_parse(codec_name, &codec, &d);
    if (rc != XDC_OK) return fail("codec", rc, &d);
    if (n_elems < 3 || bucket_elems == 0 || rounds < 1) return fail("arguments", XDC_ERR_INVALID, NULL);

    /* Credentials: a CA and one certificate per region, in a temporary folder. */
    char dir[] = "/tmp/xdc-sync-standalone-XXXXXX", cert[N_REGIONS][600], key[N_REGIONS][600], ca[700];
    if (!mkdtemp(dir)) return fail("mkdtemp", XDC_ERR_IO, NULL);
    static const char *const names[N_REGIONS] = {"us", "eu"};
    xdc_wan_cert_opts o = {.dir = dir, .run = "standalone", .days = 1};
    if ((rc = xdc_wan_cert_init_ca(&o, &d)) != XDC_OK) return fail("CA", rc, &d);
    snprintf(ca, sizeof ca, "%s/ca.pem", dir);
    side sides[N_REGIONS];
    memset(sides, 0, sizeof sides);
    for (int r = 0; r < N_REGIONS; r++) {
        o.region = names[r];
        o.rank = 0;
        if ((rc = xdc_wan_cert_issue(&o, cert[r], sizeof cert[r], key[r], sizeof key[r], &d)) != XDC_OK)
            return fail("certificate", rc, &d);
        xdc_wan_config wc = XDC_WAN_CONFIG_INIT;
        wc.cert_path = cert[r];
        wc.key_path = key[r];
        wc.ca_path = ca;
        wc.streams = 2;
        wc.frame_bytes = 64 << 10;
        sides[r].region = r;
        if ((rc = xdc_wan_engine_create(&wc, &sides[r].wan, &d)) != XDC_OK) return fail("WAN engine", rc, &d);
    }
    /* Region 1 dials region 0 on loopback. */
    xdc_wan_listener *lis;
    if ((rc = xdc_wan_listen(sides[0].wan, "127.0.0.1", 0, &lis, &d)) != XDC_OK) return fail("listen", rc, &d);
    if ((rc = xdc_wan_connect(sides[1].wan, "127.0.0.1", xdc_wan_listener_port(lis), names[0], 0, &sides[1].peers[0],
                              &d)) != XDC_OK ||
        (rc = xdc_wan_peer_wait_ready(sides[1].peers[0], 20000, &d)) != XDC_OK)
        return fail("connect", rc, &d);
    if ((rc = xdc_wan_accept(lis, 20000, &sides[0].peers[1], &d)) != XDC_OK) return fail("accept", rc, &d);

    for (int r = 0; r < N_REGIONS; r++) {
        xdc_sync_cfg sc = {.n_elems = n_elems,
                           .bucket_elems = bucket_elems,
                           .peers = sides[r].peers,
                           .n_regions = N_REGIONS,
                           .my_region = r,
                           .codec = codec,
                           .name = "standalone"};
        if ((rc = xdc_sync_engine_create(&sides[r].eng, &d)) != XDC_OK ||
            (rc = xdc_sync_create(sides[r].eng, &sc, &sides[r].sync, &d)) != XDC_OK)
            return fail("sync", rc, &d);
        sides[r].got = malloc((size_t)rounds * n_elems * sizeof(float));
        if (!sides[r].got) return fail("memory", XDC_ERR_NOMEM, NULL);
    }
    pthread_t th[N_REGIONS];
    for (int r = 0; r < N_REGIONS; r++) pthread_create(&th[r], NULL, side_main, &sides[r]);
    for (int r = 0; r < N_REGIONS; r++) pthread_join(th[r], NULL);

    float *ref = malloc((size_t)rounds * n_elems * sizeof(float));
    char why[600] = "";
    int bad = !ref || reference(ref, why, sizeof why) != 0;
    uint64_t tx = 0, raw = 0;
    for (int r = 0; r < N_REGIONS && !bad; r++) {
        if (sides[r].rc != XDC_OK) {
            snprintf(why, sizeof why, "region %s: %s: %s", names[r], xdc_errname(sides[r].rc), sides[r].why);
            bad = 1;
            break;
        }
        for (int round = 0; round < rounds && !bad; round++)
            if (memcmp(sides[r].got + (size_t)round * n_elems, ref + (size_t)round * n_elems,
                       n_elems * sizeof(float)) != 0) {
                snprintf(why, sizeof why, "region %s round %d differs from the serial reference", names[r], round);
                bad = 1;
            }
        xdc_sync_stats st;
        xdc_sync_get_stats(sides[r].sync, &st);
        tx += st.wan_tx_bytes;
        raw += st.wan_raw_bytes;
    }
    /* How far the compressed mean is from the exact one (the last round), for the record. */
    double max_err = 0, max_abs = 0;
    if (!bad) {
        float *a = malloc(n_elems * sizeof(float)), *b = malloc(n_elems * sizeof(float));
        fill(a, 0, rounds - 1);
        fill(b, 1, rounds - 1);
        for (size_t i = 0; i < n_elems; i++) {
            double exact = ((double)a[i] + b[i]) / 2, e = fabs(exact - ref[(size_t)(rounds - 1) * n_elems + i]);
            if (e > max_err) max_err = e;
            if (fabs(exact) > max_abs) max_abs = fabs(exact);
        }
        free(a);
        free(b);
    }
    /* Teardown: syncs (each completes its last sends), then their engines, then the WAN: the peers said
     * goodbye to first so neither side reads the other's departure as a broken stream. */
    for (int r = 0; r < N_REGIONS; r++) xdc_sync_destroy(sides[r].sync);
    for (int r = 0; r < N_REGIONS; r++)
        for (int p = 0; p < N_REGIONS; p++) xdc_wan_peer_close(sides[r].peers[p]);
    for (int r = 0; r < N_REGIONS; r++) xdc_sync_engine_destroy(sides[r].eng);
    for (int r = 0; r < N_REGIONS; r++) xdc_wan_engine_destroy(sides[r].wan);
    for (int r = 0; r < N_REGIONS; r++) free(sides[r].got);
    free(ref);
    remove_dir(dir);
    if (bad) {
        fprintf(stderr, "xdc_sync_standalone: FAILED: %s\n", why);
        return 1;
    }
    char cname[64];
    xdc_codec_format(&codec, cname, sizeof cname);
    printf("xdc_sync_standalone: %d regions, codec %s%s, %zu elements in buckets of %zu, %d rounds: "
           "bit-identical to the serial reference on every region; wan %llu bytes for %llu raw (x%.1f); "
           "max |error| vs the exact mean %.3g (values up to %.3g)\n",
           N_REGIONS, cname, codec.error_feedback && codec.kind != XDC_CODEC_NONE ? " + error feedback" : "", n_elems,
           bucket_elems, rounds, (unsigned long long)tx, (unsigned long long)raw, tx ? (double)raw / (double)tx : 0.0,
           max_err, max_abs);
    return 0;
}
