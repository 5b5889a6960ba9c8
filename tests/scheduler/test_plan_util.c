/* test_plan_util.c — helpers shared by the planner and simulator tests (test_plan_util.h). */
#include "tests/scheduler/test_plan_util.h"

#include "tests/xdc_test.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

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

xdc_plan_set *test_plan_search_ok(const xdc_topology *t, const xdc_model_shape *m, const xdc_batch_shape *b,
                                  const xdc_plan_opts *o)
{
    xdc_plan_set *s = NULL;
    xdc_diag d = {{0}};
    xdc_err_t rc = xdc_plan_search(t, m, b, o, &s, &d);
    XDC_ASSERT_MSG(rc == XDC_OK, "plan search failed: %s (%s)", d.msg, xdc_errname(rc));
    XDC_ASSERT(s->n_cands >= 1);
    return s;
}

void test_plan_auto_run(const char *name, const char *extra, const xdc_topology *t, orch_run_config *c,
                        orch_planned *pl, int *eval_seqs)
{
    char cwd[512], path[1024];
    XDC_ASSERT(getcwd(cwd, sizeof cwd) != NULL);
    snprintf(path, sizeof path, "%s/%s.yaml", xdc_test_tmpdir(), name);
    FILE *f = fopen(path, "w");
    XDC_ASSERT(f != NULL);
    fprintf(f, "model: %s/bench/e2e/gpt1m.yaml\ndata: /usr/share/games/fortunes\nplan: auto\n%s", cwd, extra);
    fclose(f);
    xdc_cfg_errors errs;
    xdc_err_t rc = orch_run_config_load(path, c, &errs);
    if (rc != XDC_OK) xdc_cfg_errors_print(&errs, stderr);
    XDC_ASSERT_OK(rc);
    if (eval_seqs) *eval_seqs = c->train.eval_batches * c->train.batch_size;
    xdc_diag d = {{0}};
    XDC_ASSERT_MSG(orch_plan_apply(c, t, pl, &d) == XDC_OK, "%s", d.msg);
    xdc_cfg_errors_init(&errs, path);
    rc = orch_run_config_check(c, true, &errs);
    if (rc != XDC_OK) xdc_cfg_errors_print(&errs, stderr);
    XDC_ASSERT_OK(rc);
}
