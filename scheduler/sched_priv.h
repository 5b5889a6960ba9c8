/* topo_plan_impl.h — private to the planner and the simulator: the cost model's building blocks (codec
 * table, effective speeds of regions and links, per-operation durations) that both use, so the analytic
 * planner and the event simulator price every operation the same way. */
#ifndef TOPO_PLAN_IMPL_H
#define TOPO_PLAN_IMPL_H

#include "compression/xdc_codec.h"
#include "scheduler/xdc_plan.h"

#include <stdbool.h>

#define TOPO_PLAN_MEM_HEADROOM   0.9  /* usable fraction of a GPU's memory */
#define TOPO_PLAN_MSG_OVERHEAD_S 2e-4 /* per WAN message: framing, TLS record, syscalls, wakeups */

#define TOPO_PLAN_TOPK_FRACTION 0.01 /* the top-k fraction the search tries */
/* The sparse codec's density:bits the search tries, weakest first (the densest with the most bits is
 * the most faithful; each next one counts one step lossier). From the sweep in docs/benchmarks.md. */
#define TOPO_PLAN_SPARSE_VARIANTS              \
    {                                          \
        "0.05:2", "0.03:4", "0.02:2", "0.01:2" \
    }
/* With the run's length known (xdc_plan_opts.steps), the outer rounds' sparse codec for the loss: only the first
 * this many of TOPO_PLAN_SPARSE_VARIANTS (a codec the run file names stays). bench-e2e's 4-region row at H = 10
 * (docs/benchmarks.md, "e2e", "Period and outer settings" and "Overlap and the codec for the loss"): with north
 * at 5 inner steps a round 0.05:2 and 0.03:4 both reached the reference's loss in 450 steps (2.2155, 2.2197), and
 * 0.02:2 ended 0.034 above it; with north at 4, what its measured pace (2.5x) buys, 0.03:4 ended 0.0003 above it
 * (2.2261) and 0.05:2 0.019 below (2.2066). */
#define TOPO_PLAN_LOSS_SPARSE_VARIANTS    1
/* Sparse DiLoCo with keep_unsent as bench-e2e measured it best (docs/benchmarks.md, "keep_unsent"): the
 * last round's codec and the outer learning rate (momentum: the sparse default, 0.5). */
#define TOPO_PLAN_KEEP_UNSENT_FINAL_CODEC "int4"
#define TOPO_PLAN_KEEP_UNSENT_OUTER_LR    1.5
/* The low-rank activation codec (compression/xdc_lowrank.h) as the planner offers it: its default pair
 * (activations rank C/4 int4, gradients C/2 int3), one step lossier than int8 (+0.37 % loss on the tiny
 * model against int8's ~0, docs/compression.md); it runs on one host core at TOPO_PLAN_HOST_FLOPS (the
 * encoder measured 7-10 GFLOP/s at C = 64-256 on this project's 2-core box). */
#define TOPO_PLAN_ACT_LOWRANK             "lowrank"
#define TOPO_PLAN_ACT_LOWRANK_FIDELITY    3
#define TOPO_PLAN_HOST_FLOPS              5e9

/* One codec's wire size and single-core speed: compression's estimate (xdc_codec_estimate_for) for the
 * link, and its lossiness. */
typedef struct topo_codec_info {
    double ratio;   /* wire bytes / fp32 bytes */
    double enc_Bps; /* fp32 bytes encoded per second */
    double dec_Bps; /* fp32 bytes decoded per second */
    int rank;       /* lossiness: 0 exact, higher = lossier */
} topo_codec_info;

/* An activation codec crossing a pipeline cut, microbatches of `tokens` rows of m's width: the registry's
 * numbers without zstd (latency matters more than bytes), or the low-rank codec's estimate (its ratio
 * depends on the width and rows: the basis it ships is rank × width). XDC_ERR_INVALID for an unknown name. */
xdc_err_t topo_act_codec_get(const char *name, const xdc_model_shape *m, double tokens, topo_codec_info *out);
/* The place of a sparse codec's "F:B" in TOPO_PLAN_SPARSE_VARIANTS (0 the densest); 0 for other codecs. */
int topo_sparse_variant(const char *name);
/* Fills *out for "none", "bf16", "int8", "int4", "topk:F", "sparse:F:B" (compression's registry);
 * link_gbps picks the zstd stage the runtime adds on slow links. The rank is the registry's lossiness,
 * plus the variant's place in TOPO_PLAN_SPARSE_VARIANTS for sparse. XDC_ERR_INVALID for an unknown
 * name. */
xdc_err_t topo_codec_info_get(const char *name, double link_gbps, topo_codec_info *out);
/* The codec of a gradient round over a WAN link of link_gbps: topo_codec_info_get's numbers, with the
 * wire ratio a run measured for that codec (c->wire_ratio when c->ratio_codec names it). */
xdc_err_t topo_grad_codec_get(const char *name, double link_gbps, const xdc_plan_calib *c, topo_codec_info *out);
/* The search's codec candidates, weakest first: every codec of the registry (top-k at
 * TOPO_PLAN_TOPK_FRACTION, sparse at each of TOPO_PLAN_SPARSE_VARIANTS), or for activations those the registry marks for_activations
 * and then TOPO_PLAN_ACT_LOWRANK. Returns the
 * count written (at most cap). */
int topo_codec_ladder(bool activations, char names[][16], int cap);
/* "none|bf16|int8|int4|topk:F": the names the planner accepts, for messages. */
void topo_codec_names(char *buf, size_t cap);

/* Effective FLOP/s of one worker of region r. */
double topo_region_flops(const xdc_topology *t, int r, const xdc_plan_calib *c);
/* Per-microbatch efficiency (docs/planner.md, "Per-microbatch cost"): a microbatch of tau tokens runs at
 * tau / (tau + h) of the region's effective speed, h the region's half-efficiency tokens. Every
 * microbatch re-reads the stage's weights and launches the same kernels whatever its size, which costs
 * as much as h more tokens of work: on a GPU h is its bf16 FLOP/s over its memory bandwidth (the GEMM's
 * ops:byte balance point: H100 SXM 989 TFLOP/s / 3.35 TB/s = 295, A100 312 / 1.56 = 200; NVIDIA's "GPU
 * Performance Background" and "Matrix Multiplication Background" guides), taken as 256 for every GPU
 * region; on CPU workers (gpus_per_node: 0) OpenBLAS sgemm of the GPT's widths (128, 256 -> 4C) measured
 * on the project's 2-core VM runs 64 GFLOP/s at 16 rows and ~85 from 64 rows on, so h is ~8. */
#define TOPO_PLAN_GPU_HALF_TOKENS 256.0
#define TOPO_PLAN_CPU_HALF_TOKENS 8.0
double topo_region_half_tokens(const xdc_topology *t, int r);
/* Seconds a worker of region r takes for `flops` of pipeline stage `stage` spent on microbatches of
 * `tokens` tokens: at the region's effective speed times its per-microbatch efficiency, times the
 * stage's measured factor (c->stage_scale). Every stage compute time goes through here. */
double topo_stage_compute_s(const xdc_topology *t, int r, int stage, double flops, double tokens,
                            const xdc_plan_calib *c);
/* Goodput of the directed WAN link (bytes/s; the loss-limited TCP rate when lower) and its one-way delay
 * (s). Regions without a direct link get 0 bytes/s. */
double topo_link_Bps(const xdc_topology *t, int from, int to, const xdc_plan_calib *c);
double topo_link_owd(const xdc_topology *t, int from, int to);
/* Ring reduce-scatter (= all-gather) of `bytes` over `ranks` workers of region r, seconds. */
double topo_intra_collective_s(const xdc_topology *t, int r, int ranks, double bytes);
/* Point-to-point transfer of `bytes` inside region r, seconds (c->intra_p2p_s when measured). */
double topo_intra_p2p_s(const xdc_topology *t, int r, double bytes, const xdc_plan_calib *c);

/* Forward + backward FLOPs of one microbatch of `tokens` tokens over layers [lb, le) of the model. */
double topo_stage_flops(const xdc_model_shape *m, int lb, int le, double tokens, int seq_len);
/* Activation high-water mark of a stage holding `inflight` microbatches of `batch` × `seq_len` tokens
 * at once, bytes: inflight × xdc_model_shape_slot_bytes — what the model's stage reports
 * (xdc_gpt_stage_activation_bytes) after a 1F1B step. */
double topo_stage_act_bytes(const xdc_model_shape *m, int lb, int le, int inflight, int batch, int seq_len);
/* Bytes per parameter a mode keeps beyond the weights and AdamW's state: DiLoCo/streaming's global
 * parameters, outer momentum, pseudo-gradient and snapshot; delayed sync's second gradient arena (fp32). */
#define TOPO_OUTER_BYTES_PER_PARAM 16.0
#define TOPO_DELAY_BYTES_PER_PARAM 4.0
/* Memory per GPU of a stage, GiB, with `extra_bytes_per_param` (the TOPO_*_BYTES_PER_PARAM of its mode). */
double topo_stage_mem_gib(const xdc_model_shape *m, int lb, int le, int inflight, int batch, int seq_len,
                          double extra_bytes_per_param);

/* Layers [*lb, *le) of part i of an even split of `layers` into `parts` (the runtime's orch_stage_layers). */
void topo_even_split(int layers, int parts, int i, int *lb, int *le);
/* Interleaved 1F1B (v = chunks > 1 model chunks per stage, docs/runtime.md): what stage `stage` of P holds of
 * the P·v-way even split at M microbatches per step, as the runtime's worker allocates it — each chunk its
 * parameters, AdamW state, slots (xdc_model_shape_interleaved_inflight) and backward scratch, plus the two
 * boundary buffers x_in and dy_in of one microbatch. Memory per GPU in GiB; *act_bytes the slots' bytes,
 * *inflight their count, *params and *flops_mb (forward + backward of one microbatch) summed over the chunks. */
double topo_chunks_mem_gib(const xdc_model_shape *m, int P, int stage, int chunks, int M, int batch, int seq_len,
                           double extra_bytes_per_param, double *act_bytes, int *inflight, double *params,
                           double *flops_mb);

/* Durations of one gradient bucket in the comm engine's two-stage pipeline (sync/sync_engine.c):
 * A = reduce-scatter over `ranks` + encode the shard; B = decode every region's shard + all-gather. Across
 * regions the bucket goes over `lanes` shards (xdc_plan_lanes: the fewest replicas of any region; a region with
 * more replicas than lanes all-reduces in A, twice a reduce-scatter, and its lanes broadcast in B, priced as the
 * all-gather). `wire` is a lane's shard's encoded bytes. */
typedef struct topo_bucket_cost {
    double t_a, t_b, wire;
} topo_bucket_cost;
void topo_bucket_cost_get(const xdc_topology *t, int r, int ranks, int lanes, int n_regions, double elems,
                          const topo_codec_info *ci, topo_bucket_cost *out);

/* Time of one sync round of `params` elements in `bucket_elems` buckets for a group in region r with
 * `ranks` replicas over `lanes` WAN lanes, exchanging with `n_regions` - 1 other regions over links of `link_Bps` (this group's
 * share) and `owd` one-way delay, counted from the start of the last microbatch's backward, which takes
 * overlap_s and hands buckets over as it goes (0: every bucket ready at once). Also returns the intra
 * collective seconds and the wire bytes this region sends per peer link. */
double topo_sync_round_s(const xdc_topology *t, int r, int ranks, int lanes, int n_regions, double params,
                         double bucket_elems, double overlap_s, const topo_codec_info *ci, double link_Bps, double owd,
                         double *intra_s, double *wire_bytes);

int topo_plan_n_buckets(double params, double bucket_elems);

/* The all-reduce of the gradient norm and the loss over a replica's stages that closes every step
 * (orchestrator/worker/orch_train.c, optimizer_step): a pass up the stages and back, 2 (P - 1) hand-offs
 * of a few bytes, each a WAN one-way delay where the pipeline crosses regions. Seconds, worst replica. */
double topo_step_allreduce_s(const xdc_topology *t, const xdc_plan *p, const xdc_plan_calib *c);

#endif /* TOPO_PLAN_IMPL_H */
