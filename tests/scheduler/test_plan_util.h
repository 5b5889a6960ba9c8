/* test_plan_util.h — helpers shared by the planner and simulator tests. */
#ifndef TEST_PLAN_UTIL_H
#define TEST_PLAN_UTIL_H

#include "orchestrator/runcfg/orch_run_config.h"
#include "scheduler/xdc_plan.h"

/* Parse a topology from YAML text; fails the test (naming the first error) when it does not parse. */
xdc_topology *test_plan_parse_topo(const char *yaml);
/* Load a topology file; fails the test when it does not load. */
xdc_topology *test_plan_load_topo(const char *path);
/* The demo topology (examples/topology/demo-2region.yaml) and the tiny GPT's shape
 * (examples/models/tiny.yaml: 2 layers, 4 heads, width 64, context 64, vocab 256). */
xdc_topology *test_plan_demo(xdc_model_shape *tiny);
/* xdc_plan_search that must succeed with at least one candidate (the test fails naming why not). */
xdc_plan_set *test_plan_search_ok(const xdc_topology *t, const xdc_model_shape *m, const xdc_batch_shape *b,
                                  const xdc_plan_opts *o);
/* A `plan: auto` run file of bench-e2e's model (bench/e2e/gpt1m.yaml) with `extra` lines, written as NAME.yaml,
 * loaded and its plan applied on `t`; what the run then holds must pass the run file's checks
 * (orch_run_config_check: a plan the run takes is one a run file could say). *eval_seqs (unless NULL): the
 * evaluation's sequences as the file has them, before the plan. */
void test_plan_auto_run(const char *name, const char *extra, const xdc_topology *t, orch_run_config *c,
                        orch_planned *pl, int *eval_seqs);

#endif /* TEST_PLAN_UTIL_H */
