/* test_chaos.c — `xdc launch --chaos`'s fault schedule (orch_chaos.h): the same seed gives the same faults,
 * another seed others; the rate sets how many; every kind the run allows appears, none it does not; targets
 * and durations stay in range; SEED[:RATE[:KINDS]] is parsed and its errors named; a relay's rate change
 * gives back the rate it had. */
#include "tests/xdc_test.h"

#include "orchestrator/launch/orch_chaos.h"

#include <string.h>

/* Three regions of two workers, 1000 steps, restarts, a quorum of 1, an emulated WAN, 3 etcd members and a standby
 * coordinator. */
static orch_chaos_shape full_shape(void)
{
    orch_chaos_shape sh = {
        .n_regions = 3, .steps = 1000, .restarts = 1, .spare_regions = 2, .links = 1, .etcd_members = 3, .deciders = 1};
    for (int r = 0; r < 3; r++) sh.workers[r] = 2;
    return sh;
}

static orch_chaos_spec spec(const char *text)
{
    orch_chaos_spec s;
    xdc_diag d = {{0}};
    XDC_ASSERT_MSG(orch_chaos_spec_parse(text, &s, &d) == XDC_OK, "%s: %s", text, d.msg);
    return s;
}

static int same(const orch_chaos_fault *a, const orch_chaos_fault *b, int n)
{
    for (int i = 0; i < n; i++)
        if (a[i].kind != b[i].kind || a[i].step != b[i].step || a[i].region != b[i].region ||
            a[i].other != b[i].other || a[i].rank != b[i].rank || a[i].duration_ms != b[i].duration_ms)
            return 0;
    return 1;
}

XDC_TEST(chaos_same_seed_same_schedule_other_seed_other)
{
    orch_chaos_shape sh = full_shape();
    orch_chaos_fault a[ORCH_CHAOS_MAX_FAULTS], b[ORCH_CHAOS_MAX_FAULTS], c[ORCH_CHAOS_MAX_FAULTS];
    orch_chaos_spec s1 = spec("7:1"), s2 = spec("8:1");
    int na = orch_chaos_schedule(&s1, &sh, a, ORCH_CHAOS_MAX_FAULTS);
    int nb = orch_chaos_schedule(&s1, &sh, b, ORCH_CHAOS_MAX_FAULTS);
    int nc = orch_chaos_schedule(&s2, &sh, c, ORCH_CHAOS_MAX_FAULTS);
    XDC_ASSERT_EQ(na, 30); /* 1 per region per 100 steps: 3 x 10 */
    XDC_ASSERT_EQ(nb, na);
    XDC_ASSERT(same(a, b, na));
    XDC_ASSERT_EQ(nc, na);
    XDC_ASSERT(!same(a, c, na));
}

XDC_TEST(chaos_rate_sets_the_number_of_faults_in_the_run_window)
{
    orch_chaos_shape sh = full_shape();
    orch_chaos_fault f[ORCH_CHAOS_MAX_FAULTS];
    static const struct {
        const char *spec;
        int n;
    } cases[] = {{"1:0.1", 3}, {"1:0.5", 15}, {"1:2", 60}, {"1:100", ORCH_CHAOS_MAX_FAULTS}, {"1", 30}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        orch_chaos_spec s = spec(cases[i].spec);
        int n = orch_chaos_schedule(&s, &sh, f, ORCH_CHAOS_MAX_FAULTS);
        XDC_ASSERT_MSG(n == cases[i].n, "%s: %d faults, expected %d", cases[i].spec, n, cases[i].n);
        for (int k = 0; k < n; k++) {
            XDC_ASSERT(f[k].step >= 100 && f[k].step <= 850); /* 10 % .. 85 % of the steps */
            if (k) XDC_ASSERT(f[k].step >= f[k - 1].step);
        }
    }
    sh.steps = 64; /* a short run: round(0.5 * 3 * 64 / 100) = 1 */
    orch_chaos_spec s = spec("3:0.5");
    XDC_ASSERT_EQ(orch_chaos_schedule(&s, &sh, f, ORCH_CHAOS_MAX_FAULTS), 1);
}

/* Every kind allowed shows up once a schedule has as many faults as kinds; targets and durations in range. */
XDC_TEST(chaos_covers_every_allowed_kind_with_targets_in_range)
{
    orch_chaos_shape sh = full_shape();
    orch_chaos_fault f[ORCH_CHAOS_MAX_FAULTS];
    for (uint64_t seed = 1; seed <= 20; seed++) {
        orch_chaos_spec s = spec("1:0.34"); /* 10 faults for 9 kinds */
        s.seed = seed;
        int n = orch_chaos_schedule(&s, &sh, f, ORCH_CHAOS_MAX_FAULTS), seen[ORCH_CHAOS_KINDS] = {0};
        XDC_ASSERT_EQ(n, 10);
        for (int i = 0; i < n; i++) {
            seen[f[i].kind]++;
            XDC_ASSERT(f[i].region >= 0 && f[i].region < 3);
            switch (f[i].kind) {
            case ORCH_CHAOS_STALL:
                XDC_ASSERT(f[i].duration_ms >= 2000 && f[i].duration_ms <= 30000);
                XDC_ASSERT(f[i].rank >= 0 && f[i].rank < 2);
                break;
            case ORCH_CHAOS_KILL_WORKER: XDC_ASSERT(f[i].rank >= 0 && f[i].rank < 2); break;
            case ORCH_CHAOS_LINK_DOWN:
            case ORCH_CHAOS_LINK_SLOW:
                XDC_ASSERT(f[i].region < f[i].other && f[i].other < 3);
                XDC_ASSERT(f[i].duration_ms >= 2000 && f[i].duration_ms <= 60000);
                break;
            case ORCH_CHAOS_KILL_PAIR:
                XDC_ASSERT(f[i].other >= 0 && f[i].other < 3 && f[i].other != f[i].region);
                break;
            default: break;
            }
        }
        for (int k = 0; k < ORCH_CHAOS_KINDS; k++)
            XDC_ASSERT_MSG(seen[k] >= 1, "seed %llu: no %s", (unsigned long long)seed,
                           orch_chaos_kind_name((orch_chaos_kind)k));
    }
}

/* What the run cannot take is never planned: no kills without restarts, no pair or donor kill without two
 * spare regions, no link faults without an emulated WAN, no etcd kill without its members, no decider kill
 * without a standby; KINDS narrows. */
XDC_TEST(chaos_plans_only_what_the_run_allows_and_asks_for)
{
    orch_chaos_shape sh = full_shape();
    orch_chaos_fault f[ORCH_CHAOS_MAX_FAULTS];
    orch_chaos_spec s = spec("5:1");
    sh.spare_regions = 1;
    sh.etcd_members = 0;
    sh.deciders = 0;
    int n = orch_chaos_schedule(&s, &sh, f, ORCH_CHAOS_MAX_FAULTS);
    for (int i = 0; i < n; i++)
        XDC_ASSERT(f[i].kind != ORCH_CHAOS_KILL_PAIR && f[i].kind != ORCH_CHAOS_KILL_DONOR &&
                   f[i].kind != ORCH_CHAOS_KILL_ETCD && f[i].kind != ORCH_CHAOS_KILL_DECIDER);
    sh.restarts = 0;
    n = orch_chaos_schedule(&s, &sh, f, ORCH_CHAOS_MAX_FAULTS);
    XDC_ASSERT_EQ(n, 30);
    for (int i = 0; i < n; i++) XDC_ASSERT(f[i].kind == ORCH_CHAOS_LINK_DOWN || f[i].kind == ORCH_CHAOS_LINK_SLOW);
    sh.links = 0;
    XDC_ASSERT_EQ(orch_chaos_schedule(&s, &sh, f, ORCH_CHAOS_MAX_FAULTS), 0);
    sh = full_shape();
    s = spec("5:1:kill-worker,stall");
    n = orch_chaos_schedule(&s, &sh, f, ORCH_CHAOS_MAX_FAULTS);
    XDC_ASSERT_EQ(n, 30);
    for (int i = 0; i < n; i++) XDC_ASSERT(f[i].kind == ORCH_CHAOS_KILL_WORKER || f[i].kind == ORCH_CHAOS_STALL);
}

XDC_TEST(chaos_spec_errors_are_named)
{
    orch_chaos_spec s;
    xdc_diag d = {{0}};
    s = spec("42");
    XDC_ASSERT(s.on && s.seed == 42 && s.rate == 1.0);
    XDC_ASSERT_EQ(s.kinds, (1u << ORCH_CHAOS_KINDS) - 1);
    s = spec("0:0.25:link-slow");
    XDC_ASSERT(s.seed == 0 && s.rate == 0.25 && s.kinds == 1u << ORCH_CHAOS_LINK_SLOW);
    XDC_ASSERT_ERR(orch_chaos_spec_parse("", &s, &d), XDC_ERR_INVALID);
    XDC_ASSERT_ERR(orch_chaos_spec_parse("x1", &s, &d), XDC_ERR_INVALID);
    XDC_ASSERT_STR_CONTAINS(d.msg, "seed 'x1'");
    XDC_ASSERT_ERR(orch_chaos_spec_parse("1:0", &s, &d), XDC_ERR_INVALID);
    XDC_ASSERT_STR_CONTAINS(d.msg, "rate '0'");
    XDC_ASSERT_ERR(orch_chaos_spec_parse("1:1:kill-worker,meteor", &s, &d), XDC_ERR_INVALID);
    XDC_ASSERT_STR_CONTAINS(d.msg, "unknown fault kind 'meteor'");
}

/* link-slow's lever: a relay's rate changed mid-run gives back the rate it had, so the cut is undone exactly. */
XDC_TEST(chaos_relay_rate_change_gives_back_the_rate_it_had)
{
    xdc_wan_link_model m = {.rate_mbps = 80, .rtt_ms = 4};
    xdc_wan_relay *r;
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(xdc_wan_relay_create("127.0.0.1", 0, "127.0.0.1", 9, &m, &r, &d)); /* no connection is made */
    double was = 0;
    xdc_wan_relay_set_rate(r, 8, &was);
    XDC_ASSERT_NEAR(was, 80, 1e-9);
    xdc_wan_relay_set_rate(r, was, &was);
    XDC_ASSERT_NEAR(was, 8, 1e-9);
    xdc_wan_relay_set_rate(r, 80, &was);
    XDC_ASSERT_NEAR(was, 80, 1e-9);
    xdc_wan_relay_destroy(r);
}
