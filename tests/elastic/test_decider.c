/* test_decider.c — the round decider's state as a new holder reads it from the store (orch_decider.h): what
 * one quorum writes another loads to the same decisions, and a state that does not fit the run is refused
 * rather than decided on. No store: orch_decider_state and orch_decider_load alone. */
#include "tests/xdc_test.h"

#include "orchestrator/elastic/orch_decider.h"
#include "orchestrator/rdzv/orch_rdzv_keys.h"
#include "topology/xdc_topology.h"

#include <stdio.h>
#include <string.h>

XDC_TEST(decider_state_round_trips_and_refuses_what_does_not_fit)
{
    xdc_topology *t = NULL;
    xdc_cfg_errors errs;
    XDC_ASSERT_OK(xdc_topology_load("examples/topology/demo-3region.yaml", &t, &errs));
    orch_quorum a, b;
    orch_quorum_init(&a, t, NULL, 2, 5000, 0, 4000);
    a.decided = 24;
    a.open = 24;
    memcpy(a.open_set, "110", 4);
    memcpy(a.lost_set, "010", 4);
    a.live[1] = 0;
    a.n_live = 2;
    a.left[1] = 2;
    snprintf(a.dropped, sizeof a.dropped, "eu-west (its agent exited with status 69), then eu-west rejoined");
    char state[RDZV_VALUE_MAX];
    XDC_ASSERT(orch_decider_state(&a, state, sizeof state) > 0);
    orch_quorum_init(&b, t, NULL, 2, 5000, 0, 4000);
    XDC_ASSERT_OK(orch_decider_load(&b, state, NULL));
    XDC_ASSERT(b.decided == 24 && b.open == 24 && b.pending == -1 && b.n_live == 2 && !b.live[1] && b.live[2]);
    XDC_ASSERT(strcmp(b.open_set, "110") == 0 && strcmp(b.lost_set, "010") == 0 && b.left[1] == 2 && b.left[0] == 0);
    XDC_ASSERT(strcmp(b.dropped, a.dropped) == 0);
    a.decided = RDZV_ROUND_END; /* the end decided, no round open */
    a.open = -1;
    XDC_ASSERT(orch_decider_state(&a, state, sizeof state) > 0);
    XDC_ASSERT_OK(orch_decider_load(&b, state, NULL));
    XDC_ASSERT(b.decided == RDZV_ROUND_END && b.open == -1);
    xdc_diag d = {{0}};
    static const char *const bad[] = {
        "v1 8 8 11 00 111 0,0,0 ",    /* sets of 2 for 3 regions */
        "v1 8 -1 - - 111 0,0 ",       /* 2 counts */
        "v1 8 -1 - - 1x1 0,0,0 ",     /* not a live mask */
        "v2 8 -1 - - 111 0,0,0 ",     /* another version */
        "v1 8 -1 110 000 111 0,0,0 ", /* sets with no round open */
        "v1 -7 -1 - - 111 0,0,0 ",    /* no such round */
        "",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        XDC_ASSERT_MSG(orch_decider_load(&b, bad[i], &d) == XDC_ERR_PROTO, "'%s' loaded", bad[i]);
        XDC_ASSERT_STR_CONTAINS(d.msg, "the decider's state");
    }
    XDC_ASSERT(b.decided == RDZV_ROUND_END); /* a refused state changes nothing */
    xdc_topology_destroy(t);
}
