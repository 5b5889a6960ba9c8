/* test_wan_netns.c — the network-namespace mode of the WAN emulator: two namespaces joined by the TUN
 * wire with `tc tbf`; kernel TCP across it is never faster than the configured rate nor quicker than its RTT,
 * and the namespaces are gone after destroy. Skipped without root / CAP_NET_ADMIN. */
#include "tests/test_wan_util.h"
#include "tests/xdc_test.h"

#include "wan/emu/xdc_wan_emu.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static xdc_wan_netns *netns_or_skip(const char *prefix, const xdc_wan_link_model *m)
{
    if (geteuid() != 0) xdc_test_skip("netns mode needs root (CAP_NET_ADMIN)");
    xdc_wan_link_model models[4] = {{.rate_mbps = 0}, m[0], m[0], {.rate_mbps = 0}};
    xdc_wan_netns *w = NULL;
    xdc_diag d = {{0}};
    xdc_err_t rc = xdc_wan_netns_create(prefix, 2, models, &w, &d);
    if (rc == XDC_ERR_UNAVAILABLE) xdc_test_skip("netns mode unavailable here: %s", d.msg);
    XDC_ASSERT_MSG(rc == XDC_OK, "%s", d.msg);
    return w;
}

XDC_TEST_SERIAL(wan_netns_wire_matches_the_model_and_cleans_up, 60)
{
    char prefix[32], name[64], cmd[256], out[4096];
    snprintf(prefix, sizeof prefix, "xdct%d", (int)getpid());
    xdc_wan_link_model m = {.rate_mbps = 50, .rtt_ms = 20, .seed = 5};
    xdc_wan_netns *w = netns_or_skip(prefix, &m);
    double rtt = 0, rate = 0;
    xdc_diag d = {{0}};
    xdc_err_t rc = xdc_wan_netns_measure(w, 0, 1, m.rate_mbps, 3.0, &rtt, &rate, &d);
    uint64_t fwd = 0, drop = 0;
    xdc_wan_netns_counters(w, &fwd, &drop);
    xdc_wan_netns_name(w, 1, name, sizeof name);
    xdc_wan_netns_destroy(w);
    XDC_ASSERT_MSG(rc == XDC_OK, "%s", d.msg);
    printf("netns: rtt %.2f ms (model 20), rate %.2f Mbit/s (model 50), %llu packets forwarded\n", rtt, rate,
           (unsigned long long)fwd);
    XDC_ASSERT(fwd > 1000);
    /* tbf counts IP packets: TCP goodput is at most 1448/1500 of the rate. */
    wan_test_assert_shaped(rtt, 20, rate, 50.0 * 1448 / 1500);
    snprintf(cmd, sizeof cmd, "ip netns list | grep -c '^%s' || true", name);
    xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_EQ(atoi(out), 0);
}
