/* test_plan_util.c — helpers shared by the planner and simulator tests (test_plan_util.h). */
#include "tests/scheduler/test_plan_util.h"

#include "tests/xdc_test.h"

xdc_topology *test_plan_parse_topo(const char *yaml)
{
    xdc_cfg_errors errs;
    xdc_topology *t = NULL;
    xdc_err_t rc = xdc_topology_parse(yaml, strlen(yaml), "test.yaml", &t, &errs);
    XDC_ASSERT_MSG(rc == XDC_OK, "topology does not parse: %s", errs.count ? errs.items[0].msg : xdc_strerror(rc));
    return t;
}

xdc_topology *test_plan_load_topo(const char *path)
{
    xdc_cfg_errors errs;
    xdc_topology *t = NULL;
    xdc_err_t rc = xdc_topology_load(path, &t, &errs);
    XDC_ASSERT_MSG(rc == XDC_OK, "%s does not load: %s", path, errs.count ? errs.items[0].msg : xdc_strerror(rc));
    return t;
}

xdc_topology *test_plan_demo(xdc_model_shape *tiny)
{
    xdc_model_shape_gpt(2, 4, 64, 64, 256, tiny);
    return test_plan_load_topo("examples/topology/demo-2region.yaml");
}
