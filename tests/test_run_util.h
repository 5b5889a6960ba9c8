/* test_run_util.h — run and topology files shared by the launch tests. */
#ifndef TEST_RUN_UTIL_H
#define TEST_RUN_UTIL_H

/* TMP/<name>.yaml: the tiny GPT (examples/models/tiny.yaml, by absolute path) on the fortunes corpus, sync
 * mode, 2 pipeline stages, 2 microbatches, `steps` steps, codec int8, 0.05 MiB buckets, 1 BLAS thread,
 * 30 s rendezvous and operation timeouts. Returns its path (a static buffer, valid until the next call). */
const char *test_write_tiny_run(const char *name, int steps);

/* TMP/gpus-<gpus>.yaml: the demo topology (examples/topology/demo-2region.yaml) with every region's
 * gpus_per_node set to `gpus` (workers_per_node follows it). Returns its path (a static buffer). */
const char *test_write_gpu_topology(int gpus);

#endif /* TEST_RUN_UTIL_H */
