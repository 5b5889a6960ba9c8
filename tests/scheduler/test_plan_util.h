/* test_plan_util.h — helpers shared by the planner and simulator tests. */
#ifndef TEST_PLAN_UTIL_H
#define TEST_PLAN_UTIL_H

#include "scheduler/xdc_plan.h"

/* Parse a topology from YAML text; fails the test (naming the first error) when it does not parse. */
xdc_topology *test_plan_parse_topo(const char *yaml);
/* Load a topology file; fails the test when it does not load. */
xdc_topology *test_plan_load_topo(const char *path);
/* The demo topology (examples/topology/demo-2region.yaml) and the tiny GPT's shape
 * (examples/models/tiny.yaml: 2 layers, 4 heads, width 64, context 64, vocab 256). */
xdc_topology *test_plan_demo(xdc_model_shape *tiny);

#endif /* TEST_PLAN_UTIL_H */
