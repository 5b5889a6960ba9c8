/* test_orch_util.h — run files, launches and their results for the end-to-end runtime tests
 * (test_orch.c, test_orch_reference.c, test_orch_failures.c). */
#ifndef TEST_ORCH_UTIL_H
#define TEST_ORCH_UTIL_H

#include "model/xdc_gpt.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define DATA           "/usr/share/games/fortunes"
#define TOPO           "examples/topology/demo-2region.yaml"
#define TINY           "examples/models/tiny.yaml"
#define E2E_MAX_STAGES 8 /* e2e_reference_run: stages (virtual stages of an interleaved run) */

/* Skip the test where the fortunes corpus is missing. */
void e2e_need_corpus(void);
/* A run file in the test's folder: the tiny model with `stages` pipeline stages, 2 microbatches and the
 * given mode, steps, codec, bucket size (MiB) and extras (an `extra` that names its own model or
 * microbatches replaces those). Returns its path (a static buffer). e2e_write_run_p: 0.05 MiB buckets;
 * e2e_write_run: and 2 stages. */
const char *e2e_write_run_pb(const char *name, const char *mode, int steps, const char *codec, int stages,
                             double bucket_mb, const char *extra);
const char *e2e_write_run_p(const char *name, const char *mode, int steps, const char *codec, int stages,
                            const char *extra);
const char *e2e_write_run(const char *name, const char *mode, int steps, const char *codec, const char *extra);
/* Run `xdc launch` on TOPO to completion; its exit code, output in out. */
int e2e_launch(const char *run, const char *run_dir, const char *flags, char *out, size_t cap);
/* The value of `key` (e.g. "params_xxh64=") on the launch's final line. */
void e2e_final_field(const char *out, const char *key, char *val, size_t cap);
/* `xdc launch --resume` of `run` into run_dir (output in out): it must succeed and end on `want`, the
 * uninterrupted run's params hash. */
void e2e_resume_ends_on(const char *run, const char *run_dir, const char *want, char *out, size_t cap);
/* Launch into TMP/<name>, require success and return its params hash (and the run folder). */
void e2e_launch_hash(const char *run, const char *name, const char *flags, char *out, size_t cap, char *dir,
                     size_t dir_cap, char hash[64]);
/* The tiny model with `layers` (1-9) layers and `batch` (10-99) sequences per microbatch, in the test's
 * folder; returns its path (a static buffer). */
const char *e2e_write_tiny(int layers, int batch);
/* The log of region `region`'s rank 0 worker in the run folder `dir` (logs/<region>-<host>-0.log: the host is the
 * node's name, or this machine's when an agent started by hand was not told one; a restarted worker appends to
 * it), malloc'd. */
/* Print the lines that say what went wrong or who left and came back (errors, warnings, exits, rejoins, quorums)
 * of the host's log, the agents' logs (each may be NULL) and every worker log of run folder `dir`:
 * kept in a test's output when it fails (the run folder is removed). */
void e2e_print_stories(const char *dir, const char *host_log, const char *agents, const char *again);
char *e2e_region_log(const char *dir, const char *region);
/* The final parameter hashes the workers of a run logged, one per region; returns how many. */
int e2e_final_hashes(const char *dir, char hash[][17], int cap);
/* `xdc coordinator` of `run` in the background (output into `log`, pid in *pid); returns the
 * `--coordinator` address it printed (malloc'd). */
char *e2e_start_coordinator(const char *run, const char *dir, const char *log, const char *run_id, pid_t *pid);
/* The distributed sync step written out serially, for R regions x D replicas x P stages of `model` (the run's),
 * M microbatches per step: each replica (global index q = region * D + replica) accumulates M microbatches
 * through the stages; each region averages its replicas in order ((g0 + g1 + ...) * 1/D, as the intra
 * reduce-scatter does), then the regions present are summed in region order and scaled by 1/(their number),
 * as the comm engine's mean over the members does; the gradient norm is summed over stages in float; AdamW.
 * `present` ((steps x R), NULL: every region at every step): the regions in each step's round (elastic sync
 * mode); a region out of a step reads no batch, and one back in the run continues its shard at the data
 * position of one that stayed (as a rejoining region takes the members'). With `delay` (sync.delay_steps 1) step t applies the average
 * of step t-1 at step t-1's learning rate, step 0 applies nothing and the end applies the last step's.
 * Leaves the final stage parameters in st[0..P) (P <= E2E_MAX_STAGES; the caller destroys them). */
void e2e_reference_run(int steps, int M, const char *model, int R, int D, int P, int delay, const uint8_t *present,
                       xdc_gpt_stage **st);
/* The largest difference between the parameters a run dumped (run_dir/params-stage-S.f32) and st[0..P)'s. */
double e2e_params_max_diff(const char *dir, int P, xdc_gpt_stage **st);

#endif /* TEST_ORCH_UTIL_H */
