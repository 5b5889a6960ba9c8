/* test_quorum_pace.c — the decider's half of DiLoCo's "nobody waits" (orch_quorum_pace): with a round's budget
 * and each region's slowdown, the store's host publishes the first round's inner-step counts at once and the
 * next round's with each quorum decision, a region out of the round counted 0. The host alone, against the
 * built-in store over loopback TLS; the regions' arrivals are written into the store as workers post them,
 * and the rdzv key module's value round-trips. */
#include "tests/test_wan_util.h"
#include "tests/xdc_test.h"

#include "common/xdc_time.h"
#include "orchestrator/elastic/orch_quorum.h"
#include "orchestrator/rdzv/orch_rdzv.h"
#include "orchestrator/rdzv/orch_rdzv_keys.h"
#include "topology/xdc_topology.h"

#include <string.h>

#define TOPO3 "examples/topology/demo-3region.yaml"

XDC_TEST_T(quorum_pace_counts_each_rounds_inner_steps, 30)
{
    static const char *const names[3] = {"us-east/east-node1:0", "eu-west/west-node1:0", "ap-south/south-node1:0"};
    wan_test_node node;
    wan_test_issue("certs", RDZV_SERVER_REGION, 0, 30, -60, &node);
    xdc_wan_engine *eng = wan_test_engine(&node, 1, 10000);
    xdc_topology *t = NULL;
    xdc_cfg_errors errs;
    XDC_ASSERT_OK(xdc_topology_load(TOPO3, &t, &errs));
    rdzv_server *srv = NULL;
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(rdzv_server_create(eng, "127.0.0.1", 0, names, 3, &srv, &d));
    orch_quorum q;
    orch_quorum_init(&q, t, srv, 2, 1, 0, 600000); /* a 1 ms grace window: a region not there is dropped */
    /* A budget of 10 inner steps: a region 3x slower runs 3, one 2.5x slower 4. */
    const double slowdown[3] = {1.0, 3.0, 2.5};
    orch_quorum_pace(&q, 10, slowdown);
    char val[RDZV_VALUE_MAX] = "";
    XDC_ASSERT_EQ(rdzv_server_get(srv, rdzv_key_steps(0).s, val, sizeof val), 0);
    XDC_ASSERT_MSG(strcmp(val, "10,3,4") == 0, "got '%s', expected 10,3,4", val);
    int h[3];
    XDC_ASSERT_OK(rdzv_val_steps_parse(val, 3, h));
    XDC_ASSERT_MSG(h[0] == 10 && h[1] == 3 && h[2] == 4, "parsed %d,%d,%d", h[0], h[1], h[2]);
    XDC_ASSERT_ERR(rdzv_val_steps_parse("10,3", 3, h), XDC_ERR_PROTO);
    XDC_ASSERT_ERR(rdzv_val_steps_parse("10,3,4,1", 3, h), XDC_ERR_PROTO);
    XDC_ASSERT_ERR(rdzv_val_steps_parse("10,-3,4", 3, h), XDC_ERR_PROTO);
    rdzv_key_parts parts;
    XDC_ASSERT_OK(rdzv_key_parse(rdzv_key_steps(10).s, &parts));
    XDC_ASSERT_MSG(parts.kind == RDZV_KIND_STEPS && parts.num == 10, "steps/10 parsed as kind %d, step %lld",
                   (int)parts.kind, parts.num);
    /* Two regions arrive at the round at step 10, the third never does: the round goes on without it, and the
     * next round's counts leave it out. */
    rdzv_server_set(srv, rdzv_key_outer(0, 0).s, "10");
    rdzv_server_set(srv, rdzv_key_outer(1, 0).s, "10");
    char why[512] = "";
    uint64_t end = xdc_deadline_ms(5000);
    while (rdzv_server_get(srv, rdzv_key_quorum(10).s, val, sizeof val) != 0 && !xdc_deadline_passed(end))
        XDC_ASSERT_OK(orch_quorum_tick(&q, why, sizeof why));
    XDC_ASSERT_MSG(strcmp(val, "110") == 0, "got '%s', expected 110", val);
    XDC_ASSERT_EQ(rdzv_server_get(srv, rdzv_key_steps(10).s, val, sizeof val), 0);
    XDC_ASSERT_MSG(strcmp(val, "10,3,0") == 0, "got '%s', expected 10,3,0", val);
    rdzv_server_destroy(srv);
    xdc_wan_engine_destroy(eng);
    xdc_topology_destroy(t);
}
