/* overlap.c — a libxdc program for the suite (tests/e2e/test_api.c): overlapped outer rounds
 * (xdc_outer_begin / xdc_outer_apply) with keep_unsent, against a serial reference of the same schedule, on
 * one member per region with the run file's codec (sparse). Tag 1 runs the overlapped rounds: begin, D inner
 * steps on the parameters (a deterministic per-rank drift), apply. Tag 2 is the reference: at each round it
 * starts from tag 1's parameters at begin (the snapshot s) and its state, runs a blocking xdc_outer_round,
 * and its state is read back (xdc_outer_get_state: global g', momentum m', the codec's residual r). Then,
 * bit for bit: tag 1's global and momentum equal g' and m' (the overlapped exchange averaged what the serial
 * one did, error feedback included), tag 1's residual is 0 (keep_unsent took it), and its parameters are
 * (g' + (L - s)) - r, L the parameters after the D inner steps: the progress since begin kept, the unsent
 * part kept. The reference's residual is then set to 0 (xdc_outer_set_state), as keep_unsent left tag 1's.
 * The inner steps between begin and apply are counted (the loop ran while the round was on the wire). Last,
 * tag 1's last round (xdc_outer_last_round, int8, the mean with keep_unsent) leaves every member on one
 * model (xdc_comm_check_same of its hash). Misuse is XDC_STATUS_INVALID. Prints "overlap: rank R: ..." and
 * exits 0, or says what differed and exits 1. */
#include <xdc.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N0     3000
#define N1     1096
#define N      (N0 + N1)
#define ROUNDS 3
#define D      3 /* inner steps between begin and apply */

static int fail(xdc_comm *c, const char *what, int st)
{
    fprintf(stderr, "overlap: %s: %s: %s\n", what, xdc_status_string(st), xdc_comm_last_error(c));
    return 1;
}

/* One inner step of member `rank`: a drift that differs by member, step and element. */
static void inner_step(float *x, int rank, int step)
{
    for (int i = 0; i < N; i++) x[i] -= 0.01f * sinf((float)(i * (rank + 1) + 7 * step));
}

static uint64_t fnv(const float *x, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    const unsigned char *b = (const unsigned char *)x;
    for (size_t i = 0; i < n * sizeof(float); i++) h = (h ^ b[i]) * 1099511628211ULL;
    return h;
}

static int differ(const char *what, int rank, int round, const float *got, const float *want)
{
    for (int i = 0; i < N; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0) {
            fprintf(stderr, "overlap: rank %d round %d: %s[%d] is %.9g, the serial reference %.9g\n", rank, round, what,
                    i, got[i], want[i]);
            return 1;
        }
    return 0;
}

int main(void)
{
    char err[1024];
    xdc_comm *c;
    int st = xdc_comm_create(NULL, &c, err, sizeof err);
    if (st != XDC_SUCCESS) {
        fprintf(stderr, "overlap: create: %s: %s\n", xdc_status_string(st), err);
        return 1;
    }
    int rank = xdc_comm_rank(c);
    static float x[N], ref[N], s[N], L[N], want[N], g[2][N], m[2][N], r[2][N], zero[N];
    float *px[2] = {x, x + N0}, *pref[2] = {ref, ref + N0};
    size_t counts[2] = {N0, N1};
    for (int i = 0; i < N; i++) x[i] = ref[i] = 1.0f;
    if ((st = xdc_outer_init(c, 1, 2, px, counts)) != XDC_SUCCESS) return fail(c, "outer_init 1", st);
    if ((st = xdc_outer_init(c, 2, 2, pref, counts)) != XDC_SUCCESS) return fail(c, "outer_init 2", st);
    xdc_outer_options o = XDC_OUTER_OPTIONS_INIT;
    o.keep_unsent = 1;
    o.final_codec = "int8";
    if ((st = xdc_outer_configure(c, 1, &o)) != XDC_SUCCESS) return fail(c, "configure", st);
    size_t np, nr;
    if ((st = xdc_outer_state_size(c, 1, &np, &nr)) != XDC_SUCCESS) return fail(c, "state_size", st);
    if (np != N || nr != N) {
        fprintf(stderr, "overlap: state size %zu, residual %zu; want %d each\n", np, nr, N);
        return 1;
    }
    if ((st = xdc_outer_apply(c, 1, px)) != XDC_STATUS_INVALID) return fail(c, "apply with none in flight", st);
    int step = 0, in_flight_steps = 0;
    for (int round = 1; round <= ROUNDS; round++) {
        for (int k = 0; k < 5; k++) inner_step(x, rank, step++); /* the round's inner phase */
        memcpy(s, x, sizeof s);
        memcpy(ref, x, sizeof ref);
        if ((st = xdc_outer_begin(c, 1, px)) != XDC_SUCCESS) return fail(c, "begin", st);
        if (round == 1) {
            if ((st = xdc_outer_begin(c, 1, px)) != XDC_STATUS_INVALID) return fail(c, "a second begin", st);
            if ((st = xdc_outer_get_state(c, 1, g[0], m[0], r[0])) != XDC_STATUS_INVALID)
                return fail(c, "get_state in flight", st);
            if ((st = xdc_outer_configure(c, 1, &o)) != XDC_STATUS_INVALID) return fail(c, "late configure", st);
            if ((st = xdc_outer_last_round(c, 1, px)) != XDC_STATUS_INVALID) return fail(c, "last round in flight", st);
        }
        for (int k = 0; k < D; k++, in_flight_steps++) inner_step(x, rank, step++); /* while on the wire */
        memcpy(L, x, sizeof L);
        if ((st = xdc_outer_round(c, 2, pref)) != XDC_SUCCESS) return fail(c, "reference round", st);
        if ((st = xdc_outer_get_state(c, 2, g[1], m[1], r[1])) != XDC_SUCCESS) return fail(c, "get_state 2", st);
        if ((st = xdc_outer_apply(c, 1, px)) != XDC_SUCCESS) return fail(c, "apply", st);
        if ((st = xdc_outer_get_state(c, 1, g[0], m[0], r[0])) != XDC_SUCCESS) return fail(c, "get_state 1", st);
        int unsent = 0; /* the sparse codec leaves most of the pseudo-gradient unsent: r is not 0 */
        for (int i = 0; i < N; i++) unsent += r[1][i] != 0.0f;
        if (unsent < N / 2) {
            fprintf(stderr, "overlap: rank %d round %d: only %d of %d residual values nonzero\n", rank, round, unsent,
                    N);
            return 1;
        }
        for (int i = 0; i < N; i++) {
            float progress = L[i] - s[i], kept = g[1][i] + progress;
            want[i] = kept - r[1][i];
        }
        if (differ("global", rank, round, g[0], g[1]) || differ("momentum", rank, round, m[0], m[1]) ||
            differ("residual", rank, round, r[0], zero) || differ("parameters", rank, round, x, want))
            return 1;
        if ((st = xdc_outer_set_state(c, 2, g[1], m[1], zero)) != XDC_SUCCESS) return fail(c, "set_state 2", st);
    }
    if ((st = xdc_outer_last_round(c, 1, px)) != XDC_SUCCESS) return fail(c, "last round", st);
    if ((st = xdc_outer_round(c, 1, px)) != XDC_STATUS_INVALID) return fail(c, "a round after the last", st);
    uint64_t h = fnv(x, N);
    if ((st = xdc_comm_check_same(c, h)) != XDC_SUCCESS) return fail(c, "one model after the last round", st);
    if ((st = xdc_comm_finalize(c)) != XDC_SUCCESS) return fail(c, "finalize", st);
    printf("overlap: rank %d: %d rounds equal to the serial reference, %d inner steps while a round was in "
           "flight, one model %016llx\n",
           rank, ROUNDS, in_flight_steps, (unsigned long long)h);
    xdc_comm_destroy(c);
    return 0;
}
