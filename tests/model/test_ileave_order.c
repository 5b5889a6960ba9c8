/* test_ileave_order.c — the interleaved 1F1B schedule (xdc_model_shape_interleaved_*, model/model_shape.c;
 * the runtime's steps in orch_train.c) run by every stage of a pipeline at once, in one process, under
 * NCCL's rules as the runtime meets them: a stage posts a step's group of sends and receives after its
 * compute and starts nothing else until the group completed; sends and receives between two stages match
 * in posting order. For P = 2..4 stages, v = 2..4 chunks and M = P, 2P, 3P microbatches: no stage waits
 * forever, every forward and backward finds in its stage's one input buffer (x_in, dy_in) the microbatch of
 * the neighbouring virtual stage it needs, a message never lands in a buffer still held, every
 * microbatch-chunk runs once each way, and each chunk's slots cover what it holds. */
#include "tests/xdc_test.h"

#include "model/xdc_model_shape.h"

#include <string.h>

#define MAXP 4

typedef struct {
    int kind;   /* 0: activation (y into x), 1: gradient (dx into dy) */
    int vstage; /* the sender's virtual stage */
    int mb;
} msg;

/* One direction of one pair of stages: what was sent and what was posted to receive, in posting order. */
typedef struct {
    msg sent[256];
    int kind_wanted[256];
    int n_sent, n_recv, matched;
} pair;

typedef struct {
    int P, v, M;
    int step[MAXP], n_steps[MAXP];
    int posted[MAXP];  /* the current step's group is posted, waiting to complete */
    int open[MAXP];    /* its operations still unmatched */
    int held[MAXP][2]; /* x_in, dy_in hold a message */
    msg buf[MAXP][2];
    int inflight[MAXP][8], peak[MAXP][8];
    int done_f, done_b;
    pair link[MAXP][MAXP]; /* [from][to] */
} sim;

static int ring(const sim *S, int s, int d) { return (s + d + S->P) % S->P; }

/* Forward or backward number k of stage s: checks its input and returns the message it sends (-1: none). */
static void compute(sim *S, int s, int k, int fwd, msg *out, int *to)
{
    int c, mb, vs, last = S->P * S->v - 1;
    xdc_model_shape_interleaved_op(S->P, S->v, k, fwd, &c, &mb);
    vs = s + c * S->P;
    *to = -1;
    int need = fwd ? vs > 0 : vs < last, b = fwd ? 0 : 1;
    if (need) {
        XDC_ASSERT_MSG(S->held[s][b], "P=%d v=%d M=%d: stage %d %s of chunk %d mb %d finds no input", S->P, S->v, S->M,
                       s, fwd ? "forward" : "backward", c, mb);
        XDC_ASSERT_MSG(S->buf[s][b].vstage == (fwd ? vs - 1 : vs + 1) && S->buf[s][b].mb == mb,
                       "P=%d v=%d M=%d: stage %d virtual stage %d mb %d %s reads vstage %d mb %d", S->P, S->v, S->M, s,
                       vs, mb, fwd ? "forward" : "backward", S->buf[s][b].vstage, S->buf[s][b].mb);
        S->held[s][b] = 0;
    }
    S->inflight[s][c] += fwd ? 1 : -1;
    if (S->inflight[s][c] > S->peak[s][c]) S->peak[s][c] = S->inflight[s][c];
    XDC_ASSERT(S->inflight[s][c] >= 0);
    if (fwd ? vs < last : vs > 0) {
        *out = (msg){fwd ? 0 : 1, vs, mb};
        *to = ring(S, s, fwd ? 1 : -1);
    }
    fwd ? S->done_f++ : S->done_b++;
}

/* Stage s runs its current step's compute and posts its group: sends y then dx, receives x then dy, as
 * orch_train.c's ileave_transfers does. A receive is posted into a buffer no message holds. */
static void post(sim *S, int s)
{
    xdc_ileave_step op;
    msg m[2];
    int to[2] = {-1, -1};
    xdc_model_shape_interleaved_step(S->P, s, S->v, S->M, S->step[s], &op);
    if (op.forward >= 0) compute(S, s, op.forward, 1, &m[0], &to[0]);
    if (op.backward >= 0) compute(S, s, op.backward, 0, &m[1], &to[1]);
    S->open[s] = 0;
    for (int i = 0; i < 2; i++)
        if (to[i] >= 0) {
            pair *l = &S->link[s][to[i]];
            XDC_ASSERT(l->n_sent < 256);
            l->sent[l->n_sent++] = m[i];
            S->open[s]++;
        }
    for (int b = 0; b < 2; b++) {
        if (!(b ? op.recv_dy : op.recv_x)) continue;
        XDC_ASSERT_MSG(!S->held[s][b],
                       "P=%d v=%d M=%d: stage %d step %d receives into its %s, which still holds "
                       "vstage %d mb %d",
                       S->P, S->v, S->M, s, S->step[s], b ? "dy_in" : "x_in", S->buf[s][b].vstage, S->buf[s][b].mb);
        pair *l = &S->link[ring(S, s, b ? 1 : -1)][s];
        XDC_ASSERT(l->n_recv < 256);
        l->kind_wanted[l->n_recv++] = b;
        S->open[s]++;
    }
    S->posted[s] = 1;
}

/* Match what both sides of each pair posted, in order; 1 when something matched. */
static int match(sim *S)
{
    int any = 0;
    for (int a = 0; a < S->P; a++)
        for (int b = 0; b < S->P; b++) {
            pair *l = &S->link[a][b];
            for (; l->matched < l->n_sent && l->matched < l->n_recv; l->matched++, any = 1) {
                msg m = l->sent[l->matched];
                int want = l->kind_wanted[l->matched];
                XDC_ASSERT_MSG(m.kind == want, "P=%d v=%d M=%d: stage %d's %s from stage %d matched a receive of %s",
                               S->P, S->v, S->M, b, m.kind ? "gradient" : "activation", a,
                               want ? "a gradient" : "an activation");
                S->held[b][want] = 1;
                S->buf[b][want] = m;
                S->open[a]--, S->open[b]--;
            }
        }
    return any;
}

static void run(int P, int v, int M)
{
    static sim S;
    memset(&S, 0, sizeof S);
    S.P = P, S.v = v, S.M = M;
    for (int s = 0; s < P; s++) S.n_steps[s] = xdc_model_shape_interleaved_steps(P, s, v, M);
    for (int progress = 1; progress;) {
        progress = 0;
        for (int s = 0; s < P; s++)
            if (!S.posted[s] && S.step[s] < S.n_steps[s]) post(&S, s), progress = 1;
        progress |= match(&S);
        for (int s = 0; s < P; s++)
            if (S.posted[s] && S.open[s] == 0) S.posted[s] = 0, S.step[s]++, progress = 1;
    }
    for (int s = 0; s < P; s++)
        XDC_ASSERT_MSG(S.step[s] == S.n_steps[s] && !S.posted[s], "P=%d v=%d M=%d: stage %d stops at step %d of %d", P,
                       v, M, s, S.step[s], S.n_steps[s]);
    XDC_ASSERT_EQ(S.done_f, P * v * M);
    XDC_ASSERT_EQ(S.done_b, P * v * M);
    for (int s = 0; s < P; s++)
        for (int c = 0; c < v; c++) {
            XDC_ASSERT_EQ(S.inflight[s][c], 0);
            XDC_ASSERT_EQ(S.peak[s][c], xdc_model_shape_interleaved_inflight(P, s, v, M, c));
        }
}

XDC_TEST(model_interleaved_1f1b_runs_on_every_stage_under_nccl_rules)
{
    for (int P = 2; P <= MAXP; P++)
        for (int v = 2; v <= 4; v++)
            for (int M = P; M <= 3 * P; M += P) run(P, v, M);
    /* Megatron's counts: warm-up (P − s − 1)·2 + (v − 1)·P; P = 4, v = 2, M = 8: stage 0 holds 8 + 4
     * microbatch-chunks at most, the last stage 5 + 1. */
    XDC_ASSERT_EQ(xdc_model_shape_interleaved_warmup(4, 0, 2, 8), 10);
    XDC_ASSERT_EQ(xdc_model_shape_interleaved_warmup(4, 3, 2, 8), 4);
    XDC_ASSERT_EQ(xdc_model_shape_interleaved_warmup(4, 0, 2, 4), 8); /* M = P: all warm-up */
    XDC_ASSERT_EQ(xdc_model_shape_interleaved_inflight(4, 0, 2, 8, 0), 8);
    XDC_ASSERT_EQ(xdc_model_shape_interleaved_inflight(4, 0, 2, 8, 1), 4);
    XDC_ASSERT_EQ(xdc_model_shape_interleaved_inflight(4, 3, 2, 8, 0), 5);
    XDC_ASSERT_EQ(xdc_model_shape_interleaved_inflight(4, 3, 2, 8, 1), 1);
    /* one chunk: 1F1B's bound */
    XDC_ASSERT_EQ(xdc_model_shape_interleaved_inflight(4, 1, 1, 8, 0), xdc_model_shape_1f1b_inflight(4, 1, 8));
    /* the order: forward k of P = 2, v = 2 is chunk (k mod 4) / 2 of microbatch (k / 4)·2 + k mod 2 */
    int c, mb;
    xdc_model_shape_interleaved_op(2, 2, 6, 1, &c, &mb);
    XDC_ASSERT(c == 1 && mb == 2);
    xdc_model_shape_interleaved_op(2, 2, 6, 0, &c, &mb);
    XDC_ASSERT(c == 0 && mb == 2);
}
