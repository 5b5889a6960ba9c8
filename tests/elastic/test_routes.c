/* test_routes.c — each elastic outer round's routes around links that are down or slow (orch_routes.h), on
 * bench-e2e's three regions (east - west 10 Mbit/s, east - asia 10, west - asia 5): the decider's choice from the
 * regions' reports, the route table every member builds from it, and the line a member logs when it changes. */
#include "tests/xdc_test.h"

#include "orchestrator/elastic/orch_routes.h"
#include "topology/xdc_topology.h"

#include <string.h>

#define TOPO3 "bench/e2e/three-region.yaml"

#define EQ_STR(a, b) XDC_ASSERT_MSG(strcmp((a), (b)) == 0, "'%s', not '%s'", (a), (b))

static xdc_topology *load3(void)
{
    xdc_topology *t = NULL;
    xdc_cfg_errors errs;
    XDC_ASSERT_OK(xdc_topology_load(TOPO3, &t, &errs));
    XDC_ASSERT_EQ(t->n_regions, 3);
    return t;
}

/* The decision for reports east, west, asia (one character per region each) in a round of every region. */
static const char *choose(const xdc_topology *t, const char *mask, const char *e, const char *w, const char *a)
{
    static char out[ORCH_ROUTES_VALUE_MAX];
    const char *rep[3] = {e, w, a};
    orch_routes_choose(t, mask, rep, out, sizeof out);
    return out;
}

XDC_TEST(routes_avoid_a_down_or_slow_link_through_a_faster_relay_and_nothing_else)
{
    xdc_topology *t = load3();
    XDC_ASSERT_EQ(orch_routes_report_char(0, 0.43), '4');
    XDC_ASSERT_EQ(orch_routes_report_char(0, 1.7), '9');
    XDC_ASSERT_EQ(orch_routes_report_char(1, 0.9), 'd');
    XDC_ASSERT_EQ(orch_routes_report_char(0, -1.0), '?');
    /* Every link at its rate, or not measured: direct. */
    EQ_STR(choose(t, "111", "-99", "9-9", "99-"), "-");
    EQ_STR(choose(t, "111", "-??", NULL, ""), "-");
    /* east - asia down, seen from one end: through west (the only region linked to both), whatever its rate. */
    EQ_STR(choose(t, "111", "-9d", "9-9", "99-"), "0-2:1:d");
    /* west - asia at a tenth: through east (10 Mbit/s both ways > 2 x 0.25); the lower of the two ends' measures. */
    EQ_STR(choose(t, "111", "-99", "9-0", "997"), "1-2:0:0");
    EQ_STR(choose(t, "1tc", "-99", "9-4", "99-"), "1-2:0:4"); /* regions catching up are members */
    /* Slow against what the other links show: hosts whose own pace lets every link show 0.2 of its rate. */
    EQ_STR(choose(t, "111", "-22", "2-0", "22-"), "1-2:0:0");
    EQ_STR(choose(t, "111", "-22", "2-1", "21-"), "-");
    /* Half its rate is not slow; and east - asia at 0.4 (4.5 Mbit/s) has no relay twice as fast (west: 5). */
    EQ_STR(choose(t, "111", "-99", "9-5", "995"), "-");
    EQ_STR(choose(t, "111", "-94", "9-9", "49-"), "-");
    /* The relay's own link down: no route around; a region out of the round or joining: direct. */
    EQ_STR(choose(t, "111", "-dd", "d-9", "99-"), "-");
    EQ_STR(choose(t, "110", "-9d", "9-9", NULL), "-");
    EQ_STR(choose(t, "11j", "-9d", "9-9", NULL), "-");
    xdc_topology_destroy(t);
}

XDC_TEST(routes_table_relays_each_avoided_link_and_the_change_is_logged)
{
    xdc_topology *t = load3();
    int route[9], direct[9];
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(orch_routes_table(t, "-", direct, &d));
    for (int s = 0; s < 3; s++)
        for (int r = 0; r < 3; r++) XDC_ASSERT_EQ(direct[s * 3 + r], s == r ? -1 : s);
    XDC_ASSERT_OK(orch_routes_table(t, "0-2:1:d", route, &d));
    for (int i = 0; i < 9; i++) /* asia gets east's shard from west, east asia's; the rest straight */
        XDC_ASSERT_EQ(route[i], i == 0 * 3 + 2 || i == 2 * 3 + 0 ? 1 : direct[i]);
    XDC_ASSERT(orch_routes_avoids(t, "0-2:1:d", 2, 0) && !orch_routes_avoids(t, "0-2:1:d", 0, 1));
    XDC_ASSERT(!orch_routes_avoids(t, "", 0, 2) && !orch_routes_avoids(t, "-", 0, 2));
    static const char *const bad[] = {"0-2:1", "2-0:1:d", "0-2:2:d", "0-3:1:d", "0-2:1:x", "0-2:1:d,", "x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        XDC_ASSERT_MSG(orch_routes_table(t, bad[i], route, &d) == XDC_ERR_PROTO, "'%s' taken", bad[i]);
    char line[512];
    XDC_ASSERT(orch_routes_describe(t, 90, "", "1-2:0:4", line, sizeof line));
    EQ_STR(line, "outer round at step 90: west<->asia avoided (0.4 of its rate): relayed through east");
    XDC_ASSERT(orch_routes_describe(t, 120, "1-2:0:4", "0-2:1:d", line, sizeof line));
    EQ_STR(line, "outer round at step 120: east<->asia avoided (down): relayed through west; west<->asia "
                 "direct again");
    XDC_ASSERT(orch_routes_describe(t, 150, "-", "0-1:2:0", line, sizeof line));
    XDC_ASSERT_STR_CONTAINS(line, "east<->west avoided (below 0.1 of its rate): relayed through asia");
    XDC_ASSERT(!orch_routes_describe(t, 150, "0-2:1:d", "0-2:1:d", line, sizeof line));
    XDC_ASSERT(!orch_routes_describe(t, 150, "", "-", line, sizeof line));
    xdc_topology_destroy(t);
}
