/* test_elastic_slice.c — who hands a joiner which part of the state (orch_elastic_slice): the round's member
 * regions split the parameters in proportion to their links' bandwidth to the joiner (bench-chaos's topology:
 * east-west and east-asia at 10 Mbit/s, west-asia at 5), so each slice takes about as long over its link; equal
 * shares when a member has no direct link to a joiner (star-3region: no eu-west <-> ap-south link). The slices
 * tile the parameters in region order. */
#include "tests/xdc_test.h"

#include "orchestrator/elastic/orch_elastic_member.h"
#include "topology/xdc_topology.h"

/* Region r's slice of n parameters under `mask` must be [lo, hi); every member's slices tile [0, n). */
static void expect_slice(const xdc_topology *t, size_t n, const char *mask, int r, size_t lo, size_t hi)
{
    size_t a, b;
    orch_elastic_slice(t, n, mask, r, &a, &b);
    XDC_ASSERT_MSG(a == lo && b == hi, "mask %s region %d: [%zu, %zu), expected [%zu, %zu)", mask, r, a, b, lo, hi);
    size_t at = 0;
    for (int q = 0; mask[q]; q++) {
        if (mask[q] != '1') continue;
        orch_elastic_slice(t, n, mask, q, &a, &b);
        XDC_ASSERT_MSG(a == at && b >= a, "mask %s: region %d starts at %zu, not %zu", mask, q, a, at);
        at = b;
    }
    XDC_ASSERT_MSG(at == n, "mask %s: the slices end at %zu of %zu", mask, at, n);
}

static xdc_topology *load(const char *path)
{
    xdc_topology *t = NULL;
    XDC_ASSERT_OK(xdc_topology_load(path, &t, NULL));
    return t;
}

XDC_TEST(elastic_slice_follows_each_members_link_to_the_joiner)
{
    xdc_topology *t = load("bench/e2e/three-region.yaml"); /* east, west, asia */
    expect_slice(t, 900, "11j", 0, 0, 600);                /* asia: east at 10 Mbit/s, west at 5 */
    expect_slice(t, 900, "11j", 1, 600, 900);
    expect_slice(t, 900, "1j1", 0, 0, 600); /* west: east at 10, asia at 5 */
    expect_slice(t, 900, "1j1", 2, 600, 900);
    expect_slice(t, 900, "j11", 1, 0, 450); /* east: 10 and 10 */
    expect_slice(t, 900, "1jj", 0, 0, 900); /* one member: all of it, to both joiners */
    expect_slice(t, 867072, "11j", 1, 578048, 867072);
    xdc_topology_destroy(t);
    t = load("examples/topology/star-3region.yaml"); /* no eu-west <-> ap-south link: equal shares */
    expect_slice(t, 901, "11j", 0, 0, 450);
    expect_slice(t, 901, "11j", 1, 450, 901);
    xdc_topology_destroy(t);
}
