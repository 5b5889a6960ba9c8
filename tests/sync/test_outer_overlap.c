/* test_outer_overlap.c — the overlapped outer round (orchestrator/member/orch_outer.h), delayed and eager, against
 * a serial reference: three "regions" in one process (tests/test_sync_util.h), each an orch_outer over its own
 * parameters with the sparse codec (error feedback), keep_unsent and unequal weights (nobody waits' tokens). A
 * second set of regions runs the same rounds at once (ORCH_OUTER_AT_ONCE, without keep_unsent, so its residual r
 * can be read and then set to 0, as keep_unsent leaves it) from the same parameters. After every round, bit for
 * bit: global and momentum are the serial round's on every region (the exchange averaged what the serial one did,
 * error feedback included), the overlapped residual is 0, and local = (global' + (L − s)) − r, L the parameters
 * after the inner steps that ran while the round was on the wire and s where they began: local at begin
 * (delayed), or the eager estimate, which begin writes into local: the round with this region's contribution the
 * only one in the mean, ĉ (its Δ = global − local through the codec, decoded, with no residual) times its share
 * w_k / Σw (xdc_sync_share): the outer step of global − (Δ − ĉ) (keep_unsent) and momentum with that mean.
 * Regions 0 and 1 run O_WAIT inner steps in each round's quorum hook (train while waiting: the round waits for
 * region 2): those are in the round's Δ once, and s is local after them (counted twice, L − s would hold them too).
 * A bystander (a streaming joiner training from its snapshot while its state comes, orch_rejoin.c) takes part with
 * weight 0: its rounds leave its parameters alone and give it the members' mean, and orch_outer_rebase carries its
 * progress onto the global parameters. */
#include "tests/xdc_test.h"
#include "tests/test_sync_util.h"

#include "compression/xdc_codec.h"
#include "kernels/xdc_kernels.h"
#include "kernels/xdc_model_ops.h"
#include "orchestrator/member/orch_outer.h"
#include "sync/xdc_sync.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define O_ELEMS   9000 /* three buckets, the last one short */
#define O_BUCKET  4096
#define O_REGIONS 3
#define O_ROUNDS  3
#define O_INNER   3 /* inner steps before each round */
#define O_D       2 /* inner steps while it is on the wire */
#define O_WAIT    2 /* inner steps regions 0 and 1 run in the round's quorum hook, waiting for region 2 */
#define O_LR      1.5f
#define O_MU      0.5f
#define O_CODEC   "sparse:0.05:2"

/* An inner step of region r: a drift that differs by region, step and element. */
static void inner_step(float *x, int r, int step)
{
    for (int i = 0; i < O_ELEMS; i++) x[i] -= 0.01f * sinf((float)(i * (r + 1) + 7 * step));
}

/* Train while waiting: the inner steps region r runs while the round at `round` waits for its decision. */
static void waiting_steps(float *x, int r, long long round)
{
    for (int j = 0; r < 2 && j < O_WAIT; j++) inner_step(x, r, 1000 + 10 * (int)round + j);
}

typedef struct {
    float *local;
    int r;
} waiting_ctx;

/* The quorum hook (orch_outer_hooks; ctx: a waiting_ctx): the round's decision comes after waiting_steps. */
static xdc_err_t wait_for_decision(void *ctx, xdc_sync *sync, int64_t step, xdc_diag *diag)
{
    (void)sync, (void)diag;
    const waiting_ctx *c = ctx;
    waiting_steps(c->local, c->r, step);
    return XDC_OK;
}

/* Region r's outer state over `local` with net's sync (which it then owns). */
static void outer_open(orch_outer *o, sync_net *net, int r, float *local, bool keep_unsent)
{
    memset(o, 0, sizeof *o);
    XDC_ASSERT_OK(xdc_kern_backend_get(XDC_BACKEND_CPU, &o->be, NULL));
    o->local = local;
    o->n = O_ELEMS;
    o->lr = O_LR;
    o->momentum = O_MU;
    o->keep_unsent = keep_unsent;
    o->codec = (xdc_codec_cfg)XDC_CODEC_CFG_INIT;
    XDC_ASSERT_OK(xdc_codec_parse(O_CODEC, &o->codec, NULL));
    XDC_ASSERT_OK(orch_outer_init(o, net->sync[r]));
    net->sync[r] = NULL; /* orch_outer_destroy frees it */
}

static void same(const char *what, int round, int r, const float *got, const float *want)
{
    for (int i = 0; i < O_ELEMS; i++)
        XDC_ASSERT_MSG(memcmp(&got[i], &want[i], sizeof(float)) == 0,
                       "round %d, region %d: %s[%d] is %.9g, the serial reference %.9g", round, r, what, i,
                       (double)got[i], (double)want[i]);
}

static void overlapped_rounds_equal_the_serial_reference(orch_outer_overlap how)
{
    const xdc_model_ops *ops = &xdc_model_cpu_ops;
    sync_net tn, fn;
    sync_net_open(&tn, O_REGIONS, 0, O_ELEMS, O_BUCKET, O_CODEC, NULL, "overlapped");
    sync_net_open(&fn, O_REGIONS, 0, O_ELEMS, O_BUCKET, O_CODEC, NULL, "serial");
    /* ĉ as the eager estimate takes it: the codec over the whole state, one chunk, no residual */
    xdc_codec_cfg cc = XDC_CODEC_CFG_INIT;
    XDC_ASSERT_OK(xdc_codec_parse(O_CODEC, &cc, NULL));
    cc.n_elems = cc.chunk_elems = O_ELEMS;
    cc.error_feedback = false;
    cc.zstd_level = 0;
    xdc_codec *codec = NULL;
    XDC_ASSERT_OK(xdc_codec_create(&cc, &codec, NULL));
    size_t cap = xdc_codec_bound(codec, O_ELEMS), len = 0;
    uint8_t *wire = malloc(cap);
    float *own = malloc(O_ELEMS * sizeof(float));
    const float weight[O_REGIONS] = {1.0f, 2.5f, 0.5f}; /* tokens, as nobody waits weighs them */
    size_t bytes = O_ELEMS * sizeof(float);
    orch_outer t[O_REGIONS], f[O_REGIONS];
    float *tl[O_REGIONS], *fl[O_REGIONS];
    waiting_ctx tw[O_REGIONS], fw[O_REGIONS];
    float *s = malloc(bytes), *m = malloc(bytes), *d = malloc(bytes), *r = malloc(bytes), *want = malloc(bytes);
    float *zero = calloc(O_ELEMS, sizeof(float));
    for (int k = 0; k < O_REGIONS; k++) {
        tl[k] = malloc(bytes);
        fl[k] = malloc(bytes);
        for (int i = 0; i < O_ELEMS; i++) tl[k][i] = 0.02f * cosf((float)i); /* one model everywhere */
        memcpy(fl[k], tl[k], bytes);
        outer_open(&t[k], &tn, k, tl[k], true);
        outer_open(&f[k], &fn, k, fl[k], false);
        tw[k] = (waiting_ctx){tl[k], k}, fw[k] = (waiting_ctx){fl[k], k};
        t[k].hooks = (orch_outer_hooks){.ctx = &tw[k], .quorum = wait_for_decision};
        f[k].hooks = (orch_outer_hooks){.ctx = &fw[k], .quorum = wait_for_decision};
        XDC_ASSERT_OK(xdc_sync_set_weights(t[k].sync, weight, NULL));
        XDC_ASSERT_OK(xdc_sync_set_weights(f[k].sync, weight, NULL));
    }
    int step = 0, moved = 0;
    for (int round = 0; round < O_ROUNDS; round++, step += O_D) {
        for (int k = 0; k < O_REGIONS; k++) {
            for (int j = 0; j < O_INNER; j++) inner_step(tl[k], k, step + j);
            memcpy(fl[k], tl[k], bytes); /* the reference's round starts from the same parameters */
        }
        step += O_INNER;
        float *begin_local[O_REGIONS], *start[O_REGIONS]; /* (O_ELEMS) local at begin; s */
        for (int k = 0; k < O_REGIONS; k++) {
            begin_local[k] = malloc(bytes);
            start[k] = malloc(bytes);
            memcpy(begin_local[k], tl[k], bytes);
            waiting_steps(begin_local[k], k, round); /* what the quorum hook runs */
            XDC_ASSERT_OK(orch_outer_begin(&t[k], t[k].sync, 0, O_ELEMS, round, how, NULL));
            XDC_ASSERT_OK(orch_outer_begin(&f[k], f[k].sync, 0, O_ELEMS, round, ORCH_OUTER_AT_ONCE, NULL));
            memcpy(start[k], begin_local[k], bytes);
            if (how == ORCH_OUTER_EAGER) { /* s: global − (Δ − ĉ), the outer step with ĉ·w_k/Σw for the mean */
                ops->sub(d, t[k].global, begin_local[k], O_ELEMS);
                XDC_ASSERT_OK(xdc_codec_encode(codec, d, O_ELEMS, wire, cap, &len, NULL));
                XDC_ASSERT_OK(xdc_codec_decode(codec, wire, len, own, O_ELEMS, XDC_CODEC_WRITE, NULL));
                XDC_ASSERT_MSG(memcmp(own, d, bytes) != 0, "round %d: the codec carried all of Δ", round);
                float share = weight[k] / ((weight[0] + weight[1]) + weight[2]);
                XDC_ASSERT_MSG(xdc_sync_share(t[k].sync) == share, "region %d's share %.9g, not %.9g", k,
                               (double)xdc_sync_share(t[k].sync), (double)share);
                ops->sub(d, d, own, O_ELEMS);
                ops->sub(start[k], t[k].global, d, O_ELEMS);
                for (int i = 0; i < O_ELEMS; i++) own[i] *= share;
                memcpy(m, t[k].mom, bytes);
                ops->outer_nesterov(start[k], m, own, O_ELEMS, O_LR, O_MU);
                moved += memcmp(start[k], begin_local[k], bytes) != 0;
            }
            same("local at begin", round, k, tl[k], start[k]);
        }
        for (int k = 0; k < O_REGIONS; k++)
            for (int j = 0; j < O_D; j++) inner_step(tl[k], k, step + j);
        for (int k = 0; k < O_REGIONS; k++) {
            memcpy(want, tl[k], bytes); /* L */
            XDC_ASSERT_OK(orch_outer_apply(&f[k], f[k].sync, 0, O_ELEMS, NULL));
            XDC_ASSERT_OK(orch_outer_apply(&t[k], t[k].sync, 0, O_ELEMS, NULL));
            same("global", round, k, t[k].global, f[k].global);
            same("momentum", round, k, t[k].mom, f[k].mom);
            same("global (against region 0)", round, k, t[k].global, t[0].global);
            XDC_ASSERT_OK(xdc_sync_residual_get(t[k].sync, r, O_ELEMS, NULL));
            same("residual (keep_unsent took it)", round, k, r, zero);
            XDC_ASSERT_OK(xdc_sync_residual_get(f[k].sync, r, O_ELEMS, NULL));
            XDC_ASSERT_OK(xdc_sync_residual_set(f[k].sync, zero, O_ELEMS, NULL));
            ops->sub(s, want, start[k], O_ELEMS);                 /* L − s */
            ops->residual_forward(want, t[k].global, s, O_ELEMS); /* global' + (L − s) */
            ops->sub(want, want, r, O_ELEMS);                     /* − r */
            same("local", round, k, tl[k], want);
            free(begin_local[k]);
            free(start[k]);
        }
    }
    XDC_ASSERT_MSG(how != ORCH_OUTER_EAGER || moved == O_REGIONS * O_ROUNDS,
                   "the eager estimate left local as it was in %d of %d rounds", O_REGIONS * O_ROUNDS - moved,
                   O_REGIONS * O_ROUNDS);
    for (int k = 0; k < O_REGIONS; k++) {
        orch_outer_destroy(&t[k]);
        orch_outer_destroy(&f[k]);
        free(tl[k]);
        free(fl[k]);
    }
    sync_net_close(&tn);
    sync_net_close(&fn);
    xdc_codec_destroy(codec);
    free(wire);
    free(own);
    free(s);
    free(m);
    free(d);
    free(r);
    free(want);
    free(zero);
}

XDC_TEST_T(orch_outer_delayed_rounds_equal_the_serial_reference, 60)
{
    overlapped_rounds_equal_the_serial_reference(ORCH_OUTER_DELAYED);
}

XDC_TEST_T(orch_outer_eager_rounds_equal_the_serial_reference, 60)
{
    overlapped_rounds_equal_the_serial_reference(ORCH_OUTER_EAGER);
}

/* Regions 0 and 1 run delayed rounds; region 2 is a bystander (weight 0, o->bystander) that trains on meanwhile:
 * after every round its local is what it trained (the round left it alone: no outer step, no progress re-based),
 * its o->pseudo holds the round's mean, bit for bit region 0's, and the members' global parameters are the serial
 * rounds' of regions 0 and 1 alone (its own pseudo-gradient, nonzero, went as zero). Then orch_outer_rebase over the
 * members' global gives local = global + (L − base), base where its training began. */
XDC_TEST_T(orch_outer_bystander_rounds_leave_its_parameters_and_rebase_carries_its_progress, 60)
{
    const xdc_model_ops *ops = &xdc_model_cpu_ops;
    sync_net tn, fn;
    sync_net_open(&tn, O_REGIONS, 0, O_ELEMS, O_BUCKET, "none", NULL, "bystander");
    sync_net_open(&fn, O_REGIONS - 1, 0, O_ELEMS, O_BUCKET, "none", NULL, "members");
    size_t bytes = O_ELEMS * sizeof(float);
    const uint8_t member[O_REGIONS] = {1, 1, 1};
    const float weight[O_REGIONS] = {1.0f, 1.0f, 0.0f};
    orch_outer t[O_REGIONS], f[O_REGIONS - 1];
    float *tl[O_REGIONS], *fl[O_REGIONS - 1], *base = malloc(bytes), *want = malloc(bytes), *d = malloc(bytes);
    for (int k = 0; k < O_REGIONS; k++) {
        tl[k] = malloc(bytes);
        for (int i = 0; i < O_ELEMS; i++) tl[k][i] = 0.02f * cosf((float)i) + (k == 2 ? 0.01f : 0.0f);
        outer_open(&t[k], &tn, k, tl[k], false);
        t[k].codec = (xdc_codec_cfg)XDC_CODEC_CFG_INIT;
        XDC_ASSERT_OK(xdc_sync_set_members(t[k].sync, member, weight, NULL));
        if (k == O_REGIONS - 1) continue;
        fl[k] = malloc(bytes);
        memcpy(fl[k], tl[k], bytes);
        outer_open(&f[k], &fn, k, fl[k], false);
    }
    t[2].bystander = true;
    memcpy(base, tl[2], bytes); /* its snapshot's global parameters, where it trains from */
    int step = 0;
    for (int round = 0; round < O_ROUNDS; round++, step += O_INNER + O_D) {
        for (int k = 0; k < O_REGIONS; k++)
            for (int j = 0; j < O_INNER; j++) inner_step(tl[k], k, step + j);
        for (int k = 0; k < O_REGIONS - 1; k++) memcpy(fl[k], tl[k], bytes);
        for (int k = 0; k < O_REGIONS; k++) {
            XDC_ASSERT_OK(orch_outer_begin(&t[k], t[k].sync, 0, O_ELEMS, round, ORCH_OUTER_DELAYED, NULL));
            if (k < O_REGIONS - 1)
                XDC_ASSERT_OK(orch_outer_begin(&f[k], f[k].sync, 0, O_ELEMS, round, ORCH_OUTER_AT_ONCE, NULL));
        }
        for (int k = 0; k < O_REGIONS; k++)
            for (int j = 0; j < O_D; j++) inner_step(tl[k], k, step + O_INNER + j);
        memcpy(want, tl[2], bytes);
        for (int k = 0; k < O_REGIONS; k++) {
            XDC_ASSERT_OK(orch_outer_apply(&t[k], t[k].sync, 0, O_ELEMS, NULL));
            if (k < O_REGIONS - 1) XDC_ASSERT_OK(orch_outer_apply(&f[k], f[k].sync, 0, O_ELEMS, NULL));
        }
        for (int k = 0; k < O_REGIONS - 1; k++) same("global", round, k, t[k].global, f[k].global);
        same("bystander's local", round, 2, tl[2], want);
        same("bystander's mean", round, 2, t[2].pseudo, t[0].pseudo);
        XDC_ASSERT_MSG(memcmp(tl[2], base, bytes) != 0, "round %d: the bystander did not train", round);
    }
    memcpy(t[2].global, t[0].global, bytes); /* the state it takes: the members' global parameters */
    XDC_ASSERT_OK(orch_outer_rebase(&t[2], base));
    ops->sub(d, want, base, O_ELEMS);
    ops->residual_forward(want, t[0].global, d, O_ELEMS);
    same("re-based local", O_ROUNDS, 2, tl[2], want);
    for (int k = 0; k < O_REGIONS; k++) {
        orch_outer_destroy(&t[k]);
        free(tl[k]);
        if (k == O_REGIONS - 1) continue;
        orch_outer_destroy(&f[k]);
        free(fl[k]);
    }
    sync_net_close(&tn);
    sync_net_close(&fn);
    free(base);
    free(want);
    free(d);
}
