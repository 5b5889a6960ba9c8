/* test_sync_relay.c — the cross-region sync over links that do not join every pair (xdc_sync_cfg.route): four
 * "regions" in a chain 0 - 1 - 2 - 3 on loopback WAN pairs, one comm engine each, the shards of the ends
 * relayed by the middle regions (two hops for 0 <-> 3). With int8 and error feedback, several buckets and two
 * rounds, every region ends each round on the very bytes a full mesh of the same regions gives, and the bytes
 * are counted on every hop: a relay's forwarded bytes are the shards of the regions it relays. The routes may also
 * change between rounds (xdc_sync_set_routes). */
#include "tests/xdc_test.h"
#include "tests/test_sync_util.h"

#include "sync/xdc_sync.h"

#include <stdlib.h>
#include <string.h>

#define R_N      4
#define R_ELEMS  12288
#define R_BUCKET 4096 /* three buckets: the fixed order's interleaving of own shards and forwards */

/* The chain's routes: [src * R_N + dst] the region dst gets src's shard from, the neighbour towards src. */
static int chain_route[R_N * R_N];

static void net_open(sync_net *m, int chain)
{
    for (int s = 0; s < R_N; s++)
        for (int d = 0; d < R_N; d++) chain_route[s * R_N + d] = s == d ? -1 : d < s ? d + 1 : d - 1;
    sync_net_open(m, R_N, chain, R_ELEMS, R_BUCKET, "int8", chain ? chain_route : NULL, "relay");
}

/* One round: each region's distinct contribution, all buckets ready at once. */
static void round_of(sync_net *m, int round)
{
    for (int r = 0; r < R_N; r++) {
        for (size_t i = 0; i < R_ELEMS; i++)
            m->buf[r][i] = (float)((i * 13 + (size_t)(r * 31 + round * 7)) % 97) * 0.0371f - 1.5f + 0.25f * (float)r;
        XDC_ASSERT_OK(xdc_sync_begin(m->sync[r], m->buf[r]));
        xdc_sync_mark_ready(m->sync[r], 0);
    }
    for (int r = 0; r < R_N; r++) {
        xdc_diag d = {{0}};
        xdc_err_t rc = xdc_sync_end(m->sync[r], &d);
        XDC_ASSERT_MSG(rc == XDC_OK, "round %d, region %d: %s: %s", round, r, xdc_errname(rc), d.msg);
    }
}

XDC_TEST_T(xdc_sync_relays_along_a_chain_as_a_full_mesh_sums, 60)
{
    sync_net mesh, chain;
    net_open(&mesh, 0);
    net_open(&chain, 1);
    for (int round = 0; round < 2; round++) {
        round_of(&mesh, round);
        round_of(&chain, round);
        for (int r = 0; r < R_N; r++)
            XDC_ASSERT_MSG(memcmp(chain.buf[r], mesh.buf[0], R_ELEMS * sizeof(float)) == 0,
                           "round %d: region %d over the chain differs from the full mesh", round, r);
    }
    /* Bytes per hop. Own[r]: what region r encoded, sent once per linked region in the chain. */
    xdc_sync_stats st[R_N];
    uint64_t own[R_N];
    for (int r = 0; r < R_N; r++) {
        xdc_sync_get_stats(chain.sync[r], &st[r]);
        int links = (r > 0) + (r < R_N - 1);
        own[r] = (st[r].wan_tx_bytes - st[r].wan_relay_bytes) / (uint64_t)links;
        xdc_sync_stats ms;
        xdc_sync_get_stats(mesh.sync[r], &ms);
        XDC_ASSERT_MSG(ms.wan_relay_bytes == 0 && own[r] * (R_N - 1) == ms.wan_tx_bytes,
                       "region %d encodes %llu bytes over the chain, the mesh sent %llu to 3 regions", r,
                       (unsigned long long)own[r], (unsigned long long)ms.wan_tx_bytes);
    }
    /* 1 forwards 0's to 2, and 2's and 3's to 0; 2 forwards 3's to 1, and 1's and 0's to 3; the ends none. */
    XDC_ASSERT_EQ(st[0].wan_relay_bytes, 0);
    XDC_ASSERT_EQ(st[3].wan_relay_bytes, 0);
    XDC_ASSERT_EQ(st[1].wan_relay_bytes, own[0] + own[2] + own[3]);
    XDC_ASSERT_EQ(st[2].wan_relay_bytes, own[3] + own[1] + own[0]);
    /* Regions leave the rounds only where no route relays: a relayed receive cannot be given up. */
    xdc_diag d = {{0}};
    const float w[R_N] = {1, 1, 1, 0};
    XDC_ASSERT_OK(xdc_sync_set_weights(chain.sync[0], w, &d));
    XDC_ASSERT_ERR(xdc_sync_begin(chain.sync[0], chain.buf[0]), XDC_ERR_INVALID);
    sync_net_close(&mesh);
    sync_net_close(&chain);
}

/* Routes that change between rounds (xdc_sync_set_routes): over four regions that are all linked, the second round
 * goes the chain's routes (the middle regions relay, as around links that are down), the third straight again; each
 * round ends on the full mesh's bytes, and only the relayed round forwards any. */
XDC_TEST_T(xdc_sync_routes_change_between_rounds_and_every_round_sums_as_a_full_mesh, 60)
{
    sync_net mesh, moving;
    net_open(&mesh, 0);
    net_open(&moving, 0);
    for (int round = 0; round < 3; round++) {
        for (int r = 0; r < R_N; r++) {
            xdc_diag d = {{0}};
            xdc_err_t rc = xdc_sync_set_routes(moving.sync[r], round == 1 ? chain_route : NULL, &d);
            XDC_ASSERT_MSG(rc == XDC_OK, "round %d, region %d: %s", round, r, d.msg);
        }
        uint64_t relayed[R_N];
        for (int r = 0; r < R_N; r++) {
            xdc_sync_stats st;
            xdc_sync_get_stats(moving.sync[r], &st);
            relayed[r] = st.wan_relay_bytes;
        }
        round_of(&mesh, round);
        round_of(&moving, round);
        for (int r = 0; r < R_N; r++) {
            xdc_sync_stats st;
            xdc_sync_get_stats(moving.sync[r], &st);
            int relays = round == 1 && (r == 1 || r == 2);
            XDC_ASSERT_MSG((st.wan_relay_bytes > relayed[r]) == relays, "round %d: region %d relayed %llu bytes", round,
                           r, (unsigned long long)(st.wan_relay_bytes - relayed[r]));
            XDC_ASSERT_MSG(memcmp(moving.buf[r], mesh.buf[0], R_ELEMS * sizeof(float)) == 0,
                           "round %d: region %d on routes that change differs from the full mesh", round, r);
        }
    }
    xdc_diag d = {{0}};
    for (int r = 0; r < R_N; r++) XDC_ASSERT_OK(xdc_sync_begin(moving.sync[r], moving.buf[r]));
    XDC_ASSERT_ERR(xdc_sync_set_routes(moving.sync[0], chain_route, &d), XDC_ERR_INVALID); /* during a round */
    XDC_ASSERT_STR_CONTAINS(d.msg, "between rounds only");
    for (int r = 0; r < R_N; r++) xdc_sync_mark_ready(moving.sync[r], 0);
    for (int r = 0; r < R_N; r++) XDC_ASSERT_OK(xdc_sync_end(moving.sync[r], NULL));
    sync_net_close(&mesh);
    sync_net_close(&moving);
}

/* A route in a circle is refused at creation, naming the regions; a route over a peer not connected yet is
 * not (a rejoining worker dials its peers after it created its syncs, orchestrator/worker/orch_rejoin.c), but a
 * round over it is. */
XDC_TEST(xdc_sync_route_in_a_circle_is_refused_a_round_over_a_missing_peer_too)
{
    xdc_sync_engine *eng;
    XDC_ASSERT_OK(xdc_sync_engine_create(&eng, NULL));
    int route[R_N * R_N];
    for (int s = 0; s < R_N; s++)
        for (int d = 0; d < R_N; d++) route[s * R_N + d] = s == d ? -1 : s;        /* a full mesh... */
    xdc_wan_peer *peers[R_N] = {NULL, (xdc_wan_peer *)1, (xdc_wan_peer *)1, NULL}; /* ...3 not connected yet */
    xdc_sync_cfg cfg = {.n_elems = 16,
                        .bucket_elems = 16,
                        .peers = peers,
                        .n_regions = R_N,
                        .my_region = 0,
                        .route = route,
                        .name = "relay"};
    cfg.codec = (xdc_codec_cfg)XDC_CODEC_CFG_INIT;
    xdc_sync *s = NULL;
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(xdc_sync_create(eng, &cfg, &s, &d)); /* a rejoiner dials its peers after this */
    float buf[16] = {0};
    XDC_ASSERT_ERR(xdc_sync_begin(s, buf), XDC_ERR_INVALID); /* a round needs them */
    xdc_sync_destroy(s);
    s = NULL;
    route[3 * R_N + 0] = 2, route[3 * R_N + 2] = 0; /* ...but 3's shard to 0 comes via 2, and to 2 via 0 */
    XDC_ASSERT_ERR(xdc_sync_create(eng, &cfg, &s, &d), XDC_ERR_INVALID);
    XDC_ASSERT_STR_CONTAINS(d.msg, "no route from region 3 to region 0");
    xdc_sync_engine_destroy(eng);
}
