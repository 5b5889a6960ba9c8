/* test_rdzv_quota.c — the rendezvous quotas' arithmetic (orchestrator/rdzv/orch_rdzv_quota.c) and their
 * size from a run's shape (orch_run_config_rdzv_shape): how many rejoin bootstraps and re-plan keys each
 * kind of run may write, and how a member's own client classes the keys it writes (etcd). */
#include "tests/xdc_test.h"

#include "orchestrator/rdzv/orch_rdzv_quota.h"
#include "orchestrator/runcfg/orch_run_config.h"

#include <string.h>

/* A run config with only what the shape reads. */
static orch_run_config shape_cfg(orch_mode mode, int steps, int inner_steps)
{
    orch_run_config c;
    memset(&c, 0, sizeof c);
    c.mode = mode;
    c.train.steps = steps;
    c.diloco.inner_steps = inner_steps;
    c.replan_every = 50;
    return c;
}

XDC_TEST(rdzv_quota_sized_from_the_runs_shape)
{
    rdzv_run_shape sh;
    /* sync: no outer rounds, nobody rejoins; no re-plan without plan: auto */
    orch_run_config c = shape_cfg(ORCH_MODE_SYNC, 1000, 0);
    orch_run_config_rdzv_shape(&c, 2, &sh);
    XDC_ASSERT(sh.rejoins == 0 && sh.replans == 0);
    /* sync with `elastic:`: every step a round, and the end; with delayed averaging all or nothing again */
    c.elastic.set = true;
    orch_run_config_rdzv_shape(&c, 2, &sh);
    XDC_ASSERT_EQ(sh.rejoins, 1001);
    c.sync.delay_steps = 1;
    orch_run_config_rdzv_shape(&c, 2, &sh);
    XDC_ASSERT_EQ(sh.rejoins, 0);
    /* DiLoCo, 1000 steps of H = 30: 34 rounds, and the end */
    c = shape_cfg(ORCH_MODE_DILOCO, 1000, 30);
    orch_run_config_rdzv_shape(&c, 3, &sh);
    XDC_ASSERT_EQ(sh.rejoins, 35);
    XDC_ASSERT_EQ(sh.replans, 0);
    /* ... over one region, or one pipeline spanning them: not elastic */
    orch_run_config_rdzv_shape(&c, 1, &sh);
    XDC_ASSERT_EQ(sh.rejoins, 0);
    c.span_regions = true;
    orch_run_config_rdzv_shape(&c, 3, &sh);
    XDC_ASSERT_EQ(sh.rejoins, 0);
    /* streaming, 4 fragments per period of 10: a round per fragment due */
    c = shape_cfg(ORCH_MODE_STREAMING, 100, 10);
    c.streaming.fragments = 4;
    orch_run_config_rdzv_shape(&c, 2, &sh);
    XDC_ASSERT_EQ(sh.rejoins, 41);
    /* plan: auto: a re-plan check every replan_every steps; a re-plan may shorten the period to a step */
    c = shape_cfg(ORCH_MODE_DILOCO, 200, 20);
    c.plan_auto = true;
    orch_run_config_rdzv_shape(&c, 2, &sh);
    XDC_ASSERT_EQ(sh.replans, 4);
    XDC_ASSERT_EQ(sh.rejoins, 201);
    c.replan_every = 0;
    orch_run_config_rdzv_shape(&c, 2, &sh);
    XDC_ASSERT_EQ(sh.replans, 0);

    rdzv_quota q;
    rdzv_quota_for_run(&q, &(rdzv_run_shape){.rejoins = 35, .replans = 4});
    XDC_ASSERT_EQ(q.keys[RDZV_KEY_REJOIN], 35 + RDZV_QUOTA_MARGIN);
    XDC_ASSERT_EQ(q.keys[RDZV_KEY_PREFIX], 4 + RDZV_QUOTA_MARGIN);
    XDC_ASSERT_EQ(q.keys[RDZV_KEY_OWN], RDZV_QUOTA_OWN_KEYS);
    XDC_ASSERT(q.bytes[RDZV_KEY_PREFIX] == (size_t)(4 + RDZV_QUOTA_MARGIN) * RDZV_QUOTA_PREFIX_VALUE);
    /* a run file's largest counts do not overflow the key counts */
    rdzv_quota_for_run(&q, &(rdzv_run_shape){.rejoins = 1L << 40, .replans = -5});
    XDC_ASSERT(q.keys[RDZV_KEY_REJOIN] > 0 && q.keys[RDZV_KEY_PREFIX] == RDZV_QUOTA_MARGIN);
}

XDC_TEST(rdzv_quota_check_counts_keys_and_bytes)
{
    rdzv_quota q;
    rdzv_usage u;
    memset(&u, 0, sizeof u);
    char why[160];
    rdzv_quota_for_run(&q, &(rdzv_run_shape){.rejoins = 0, .replans = 0});
    for (int i = 0; i < RDZV_QUOTA_MARGIN; i++) {
        XDC_ASSERT(rdzv_quota_check(&q, &u, RDZV_KEY_REJOIN, 1, 0, 300, why, sizeof why) == 0);
        rdzv_quota_charge(&u, RDZV_KEY_REJOIN, +1, 300);
    }
    XDC_ASSERT(rdzv_quota_check(&q, &u, RDZV_KEY_REJOIN, 1, 0, 1, why, sizeof why) == -1);
    XDC_ASSERT_STR_CONTAINS(why, "over its quota of 8 keys");
    /* an overwrite adds no key; its bytes replace the old ones, within the class's byte budget */
    XDC_ASSERT(rdzv_quota_check(&q, &u, RDZV_KEY_REJOIN, 0, 300, 900, why, sizeof why) == 0);
    XDC_ASSERT(rdzv_quota_check(&q, &u, RDZV_KEY_REJOIN, 0, 300, 4000, why, sizeof why) == -1);
    XDC_ASSERT_STR_CONTAINS(why, "value bytes");
    XDC_ASSERT(rdzv_quota_check(&q, &u, RDZV_KEY_DENIED, 1, 0, 1, why, sizeof why) == -1);
}

XDC_TEST(rdzv_quota_classify_as_a_member_sees_its_keys)
{
    const char *m = "us-east/east-node1:0";
    XDC_ASSERT_EQ(rdzv_quota_classify(m, "intra/us-east/3"), RDZV_KEY_REJOIN);
    XDC_ASSERT_EQ(rdzv_quota_classify(m, "intra/us-east"), RDZV_KEY_OWN);
    XDC_ASSERT_EQ(rdzv_quota_classify(m, "intra/us-east/"), RDZV_KEY_OWN);
    XDC_ASSERT_EQ(rdzv_quota_classify(m, "intra/us-east/3x"), RDZV_KEY_OWN);
    XDC_ASSERT_EQ(rdzv_quota_classify(m, "intra/us-eastern/3"), RDZV_KEY_OWN);
    XDC_ASSERT_EQ(rdzv_quota_classify(m, "replan/150"), RDZV_KEY_PREFIX);
    XDC_ASSERT_EQ(rdzv_quota_classify(m, "replan/link/1"), RDZV_KEY_OWN);
    XDC_ASSERT_EQ(rdzv_quota_classify(m, "finished"), RDZV_KEY_GRANT);
    XDC_ASSERT_EQ(rdzv_quota_classify(m, "result"), RDZV_KEY_GRANT);
    XDC_ASSERT_EQ(rdzv_quota_classify(m, "wan/0/0"), RDZV_KEY_OWN);
}
