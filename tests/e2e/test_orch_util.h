/* test_orch_util.h — run files, launches and their results for the end-to-end runtime tests
 * (test_orch.c, test_orch_reference.c, test_orch_failures.c). */
#ifndef TEST_ORCH_UTIL_H
#define TEST_ORCH_UTIL_H

#include <stddef.h>
#include <sys/types.h>

#define DATA "/usr/share/games/fortunes"
#define TOPO "examples/topology/demo-2region.yaml"
#define TINY "examples/models/tiny.yaml"

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
/* Launch into TMP/<name>, require success and return its params hash (and the run folder). */
void e2e_launch_hash(const char *run, const char *name, const char *flags, char *out, size_t cap, char *dir,
                     size_t dir_cap, char hash[64]);
/* The tiny model with `layers` (1-9) layers and `batch` (10-99) sequences per microbatch, in the test's
 * folder; returns its path (a static buffer). */
const char *e2e_write_tiny(int layers, int batch);
/* The final parameter hashes the workers of a run logged, one per region; returns how many. */
int e2e_final_hashes(const char *dir, char hash[][17], int cap);
/* `xdc coordinator` of `run` in the background (output into `log`, pid in *pid); returns the
 * `--coordinator` address it printed (malloc'd). */
char *e2e_start_coordinator(const char *run, const char *dir, const char *log, const char *run_id, pid_t *pid);

#endif /* TEST_ORCH_UTIL_H */
