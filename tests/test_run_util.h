/* test_run_util.h — run files shared by the end-to-end tests. */
#ifndef TEST_RUN_UTIL_H
#define TEST_RUN_UTIL_H

/* TMP/<name>.yaml: the tiny GPT (examples/models/tiny.yaml, by absolute path) on the fortunes corpus, sync
 * mode, 2 pipeline stages, 2 microbatches, `steps` steps, codec int8, 0.05 MiB buckets, 1 BLAS thread,
 * 30 s rendezvous and operation timeouts. Returns its path (a static buffer, valid until the next call). */
const char *test_write_tiny_run(const char *name, int steps);

#endif /* TEST_RUN_UTIL_H */
