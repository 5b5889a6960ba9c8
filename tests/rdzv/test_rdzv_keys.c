/* test_rdzv_keys.c — the store's key schema (orchestrator/rdzv/orch_rdzv_keys.h): every key built parses
 * back to its parts and builds again to the same text; non-canonical or foreign text is refused; which
 * member owns which key; the elastic protocol's shared values round-trip and refuse malformed text. */
#include "tests/xdc_test.h"

#include "orchestrator/rdzv/orch_rdzv_keys.h"

#include <string.h>

/* `k` parses as `kind`, and its parts build it again (by `again`, given the parts). */
static void round_trip(rdzv_key k, rdzv_key_kind kind, rdzv_key (*again)(const rdzv_key_parts *p))
{
    rdzv_key_parts p;
    XDC_ASSERT_MSG(rdzv_key_parse(k.s, &p) == XDC_OK, "'%s' does not parse", k.s);
    XDC_ASSERT_MSG(p.kind == kind, "'%s' parsed as kind %d", k.s, (int)p.kind);
    XDC_ASSERT_MSG(strcmp(again(&p).s, k.s) == 0, "'%s' built again as '%s'", k.s, again(&p).s);
}

static rdzv_key wan_of(const rdzv_key_parts *p) { return rdzv_key_wan(p->region_idx, p->rank); }
static rdzv_key relay_of(const rdzv_key_parts *p) { return rdzv_key_relay(p->region_idx, p->to, p->rank); }
static rdzv_key outer_of(const rdzv_key_parts *p) { return rdzv_key_outer(p->region_idx, p->rank); }
static rdzv_key xchg_of(const rdzv_key_parts *p) { return rdzv_key_xchg(p->region_idx, p->rank); }
static rdzv_key links_of(const rdzv_key_parts *p) { return rdzv_key_links(p->region_idx, p->rank); }
static rdzv_key routes_of(const rdzv_key_parts *p) { return rdzv_key_routes(p->num); }
static rdzv_key metrics_of(const rdzv_key_parts *p) { return rdzv_key_metrics(p->name, p->rank); }
static rdzv_key failed_of(const rdzv_key_parts *p) { return rdzv_key_failed(p->name); }
static rdzv_key intra_of(const rdzv_key_parts *p) { return rdzv_key_intra(p->name); }
static rdzv_key intra_after_of(const rdzv_key_parts *p) { return rdzv_key_intra_after(p->name, (int)p->num); }
static rdzv_key replan_of(const rdzv_key_parts *p) { return rdzv_key_replan(p->num); }
static rdzv_key replan_link_of(const rdzv_key_parts *p) { return rdzv_key_replan_link(p->region_idx); }
static rdzv_key quorum_of(const rdzv_key_parts *p) { return rdzv_key_quorum(p->num); }
static rdzv_key final_of(const rdzv_key_parts *p) { return rdzv_key_final(p->num); }
static rdzv_key lost_of(const rdzv_key_parts *p) { return rdzv_key_lost(p->num); }
static rdzv_key left_of(const rdzv_key_parts *p) { return rdzv_key_left(p->region_idx); }
static rdzv_key rejoin_of(const rdzv_key_parts *p) { return rdzv_key_rejoin(p->name); }
static rdzv_key ran_of(const rdzv_key_parts *p) { return rdzv_key_ran(p->num); }

XDC_TEST(rdzv_keys_parse_back_to_what_was_built)
{
    round_trip(rdzv_key_wan(2, 13), RDZV_KIND_WAN, wan_of);
    round_trip(rdzv_key_relay(0, 2, 1), RDZV_KIND_RELAY, relay_of);
    round_trip(rdzv_key_outer(1, 0), RDZV_KIND_OUTER, outer_of);
    round_trip(rdzv_key_xchg(10, 3), RDZV_KIND_XCHG, xchg_of);
    round_trip(rdzv_key_links(2, 0), RDZV_KIND_LINKS, links_of);
    round_trip(rdzv_key_routes(90), RDZV_KIND_ROUTES, routes_of);
    round_trip(rdzv_key_ran(60), RDZV_KIND_RAN, ran_of);
    round_trip(rdzv_key_metrics("eu-west", 3), RDZV_KIND_METRICS, metrics_of);
    round_trip(rdzv_key_failed("eu-west/west-node1:0"), RDZV_KIND_FAILED, failed_of);
    round_trip(rdzv_key_intra("us-east"), RDZV_KIND_INTRA, intra_of);
    round_trip(rdzv_key_intra_after("us-east", 2), RDZV_KIND_INTRA_AFTER, intra_after_of);
    round_trip(rdzv_key_replan(120), RDZV_KIND_REPLAN, replan_of);
    round_trip(rdzv_key_replan_link(1), RDZV_KIND_REPLAN_LINK, replan_link_of);
    round_trip(rdzv_key_quorum(40), RDZV_KIND_QUORUM, quorum_of);
    round_trip(rdzv_key_quorum(RDZV_ROUND_END), RDZV_KIND_QUORUM, quorum_of);
    round_trip(rdzv_key_final(0), RDZV_KIND_FINAL, final_of);
    round_trip(rdzv_key_lost(999999), RDZV_KIND_LOST, lost_of);
    round_trip(rdzv_key_left(2), RDZV_KIND_LEFT, left_of);
    round_trip(rdzv_key_rejoin("4242-1733000000"), RDZV_KIND_REJOIN, rejoin_of);
    XDC_ASSERT(strcmp(rdzv_key_quorum(RDZV_ROUND_END).s, "quorum/end") == 0);
    XDC_ASSERT(strcmp(rdzv_key_intra_after("us-east", 2).s, "intra/us-east/2") == 0);
    rdzv_key_parts p;
    XDC_ASSERT_OK(rdzv_key_parse(RDZV_KEY_RESULT, &p));
    XDC_ASSERT_EQ(p.kind, RDZV_KIND_RESULT);
    XDC_ASSERT_OK(rdzv_key_parse(RDZV_KEY_FINISHED, &p));
    XDC_ASSERT_EQ(p.kind, RDZV_KIND_FINISHED);
}

XDC_TEST(rdzv_keys_refuse_what_is_not_canonical)
{
    static const char *const bad[] = {
        "",           "wan/",       "wan/1",          "wan/1/",       "wan/01/0",
        "wan/1/0/x",  "wan/-1/0",   "wan/+1/0",       "wan/1/0 ",     "outer/1/1234567890",
        "relay/0/1",  "intra/",     "intra/eu-west/", "intra/eu/1x",  "intra/eu/007",
        "metrics/0",  "metrics//0", "failed/",        "quorum/",      "quorum/-4",
        "quorum/ENd", "final/end",  "lost/4a",        "left/",        "rejoin/",
        "rejoin/a b", "rejoin/a/b", "results",        "replan/link/", "nope/1/0",
        "device/",    "device/a/b"};
    rdzv_key_parts p;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        XDC_ASSERT_MSG(rdzv_key_parse(bad[i], &p) == XDC_ERR_PROTO, "'%s' parsed", bad[i]);
    XDC_ASSERT_ERR(rdzv_key_parse(NULL, &p), XDC_ERR_PROTO);
}

/* The store's admission rule for member eu-west/west-node1:<rank> of region index 1. */
XDC_TEST(rdzv_keys_a_member_owns_its_own_keys_only)
{
    const char *me = "eu-west/west-node1:0", *region = "eu-west";
    static const char *const mine[] = {"wan/1/0",       "outer/1/0",         "xchg/1/0",
                                       "links/1/0",     "stats/1/0",         "ckpt/1/0",
                                       "warm/1/0",      "metrics/eu-west/0", "failed/eu-west/west-node1:0",
                                       "intra/eu-west", "intra/eu-west/2",   "device/eu-west",
                                       "replan/link/1"};
    static const char *const theirs[] = {"wan/0/0",
                                         "wan/1/1",
                                         "warm/2/0",
                                         "outer/0/0",
                                         "xchg/1/1",
                                         "metrics/us-east/0",
                                         "failed/eu-west/west-node1:1",
                                         "intra/us-east",
                                         "replan/link/0",
                                         "replan/5",
                                         "result",
                                         "finished",
                                         "quorum/4",
                                         "final/4",
                                         "lost/4",
                                         "left/1",
                                         "rejoin/n1",
                                         "relay/1/0/0",
                                         "abort",
                                         "links/0/0",
                                         "routes/4"};
    for (size_t k = 0; k < sizeof mine / sizeof mine[0]; k++)
        XDC_ASSERT_MSG(rdzv_key_owned_by(mine[k], me, region, 1, 0, NULL), "%s is not owned", mine[k]);
    for (size_t k = 0; k < sizeof theirs / sizeof theirs[0]; k++)
        XDC_ASSERT_MSG(!rdzv_key_owned_by(theirs[k], me, region, 1, 0, NULL), "%s is owned", theirs[k]);
    /* A rank other than 0 owns none of its region's keys. */
    XDC_ASSERT(!rdzv_key_owned_by("intra/eu-west", "eu-west/west-node1:1", region, 1, 1, NULL));
    XDC_ASSERT(!rdzv_key_owned_by("device/eu-west", "eu-west/west-node1:1", region, 1, 1, NULL));
    XDC_ASSERT(rdzv_key_owned_by("wan/1/1", "eu-west/west-node1:1", region, 1, 1, NULL));
}

XDC_TEST(rdzv_keys_elastic_values_round_trip_and_refuse_malformed_text)
{
    long long round;
    char nonce[RDZV_NONCE_MAX], set[8];
    XDC_ASSERT(strcmp(rdzv_val_round(12).s, "12") == 0);
    XDC_ASSERT(strcmp(rdzv_val_round(RDZV_ROUND_END).s, "end") == 0);
    XDC_ASSERT_OK(rdzv_val_outer_parse("12", &round, nonce, NULL, NULL));
    XDC_ASSERT(round == 12 && !nonce[0]);
    XDC_ASSERT_OK(rdzv_val_outer_parse("end", &round, nonce, NULL, NULL));
    XDC_ASSERT(round == RDZV_ROUND_END);
    XDC_ASSERT_OK(rdzv_val_outer_parse(rdzv_val_join("77-123", 0).s, &round, nonce, NULL, NULL));
    XDC_ASSERT(round == -1 && strcmp(nonce, "77-123") == 0);
    int ran = -1;
    XDC_ASSERT(strcmp(rdzv_val_join("77-123", 5).s, "join:77-123+5") == 0);
    XDC_ASSERT_OK(rdzv_val_outer_parse("join:77-123+5", &round, nonce, NULL, &ran));
    XDC_ASSERT(round == -1 && strcmp(nonce, "77-123") == 0 && ran == 5);
    XDC_ASSERT(rdzv_val_outer_parse("join:77-123+", &round, nonce, NULL, &ran) == XDC_ERR_PROTO);
    XDC_ASSERT(rdzv_val_outer_parse("join:77-123+0", &round, nonce, NULL, &ran) == XDC_ERR_PROTO);
    XDC_ASSERT(rdzv_val_outer_parse("join:+3", &round, nonce, NULL, &ran) == XDC_ERR_PROTO);
    XDC_ASSERT(rdzv_val_outer_parse("join:7+3+3", &round, nonce, NULL, &ran) == XDC_ERR_PROTO);
    rdzv_arrive_kind kind;
    XDC_ASSERT(strcmp(rdzv_val_arrival(24, RDZV_ARRIVE_TAKING, 0).s, "taking:24") == 0);
    XDC_ASSERT_OK(rdzv_val_outer_parse("taking:24", &round, nonce, &kind, NULL));
    XDC_ASSERT(round == 24 && !nonce[0] && kind == RDZV_ARRIVE_TAKING);
    XDC_ASSERT_OK(
        rdzv_val_outer_parse(rdzv_val_arrival(RDZV_ROUND_END, RDZV_ARRIVE_TOOK, 0).s, &round, nonce, &kind, NULL));
    XDC_ASSERT(round == RDZV_ROUND_END && kind == RDZV_ARRIVE_TOOK);
    int extra = -1;
    XDC_ASSERT_OK(rdzv_val_outer_parse("24", &round, nonce, &kind, &extra));
    XDC_ASSERT(round == 24 && kind == RDZV_ARRIVE && extra == 0);
    /* a member training while it waits for the round's decision (train_while_waiting) */
    XDC_ASSERT(strcmp(rdzv_val_arrival(30, RDZV_ARRIVE, 7).s, "30+7") == 0 &&
               strcmp(rdzv_val_arrival(30, RDZV_ARRIVE, 0).s, "30") == 0);
    XDC_ASSERT_OK(rdzv_val_outer_parse("30+7", &round, nonce, &kind, &extra));
    XDC_ASSERT(round == 30 && kind == RDZV_ARRIVE && extra == 7 && !nonce[0]);
    /* a streaming joiner training from its snapshot while its state comes */
    XDC_ASSERT(strcmp(rdzv_val_arrival(40, RDZV_ARRIVE_TAKING, 9).s, "taking:40+9") == 0);
    XDC_ASSERT_OK(rdzv_val_outer_parse("took:40+9", &round, nonce, &kind, &extra));
    XDC_ASSERT(round == 40 && kind == RDZV_ARRIVE_TOOK && extra == 9 && !nonce[0]);
    static const char *const bad_outer[] = {
        "",    "-3",   "012",   "12 ",   "join:", "join:a b", "join:a/b",    "END",        "taking:",  "took:012",
        "30+", "30+0", "30+07", "30+-1", "end+2", "30+2+1",   "taking:40+0", "took:end+1", "taking:+3"};
    for (size_t i = 0; i < sizeof bad_outer / sizeof bad_outer[0]; i++)
        XDC_ASSERT_MSG(rdzv_val_outer_parse(bad_outer[i], &round, nonce, NULL, NULL) == XDC_ERR_PROTO, "'%s' parsed",
                       bad_outer[i]);
    uint8_t got[3] = {1, 0, 1};
    XDC_ASSERT(strcmp(rdzv_val_xchg(8, got, 3).s, "8:101") == 0);
    XDC_ASSERT_OK(rdzv_val_xchg_parse("8:101", 3, &round, set));
    XDC_ASSERT(round == 8 && strcmp(set, "101") == 0);
    static const char *const bad_xchg[] = {"8:10", "8:1011", "8;101", ":101", "8:1j1", "08:101", "8:"};
    for (size_t i = 0; i < sizeof bad_xchg / sizeof bad_xchg[0]; i++)
        XDC_ASSERT_MSG(rdzv_val_xchg_parse(bad_xchg[i], 3, &round, set) == XDC_ERR_PROTO, "'%s' parsed", bad_xchg[i]);
    /* An etcd member's holder record: generation, lease, certificate digest ('-': none). */
    rdzv_holder h = {.generation = 2, .lease = "7587888"}, back;
    memset(h.cert, 'a', 64);
    XDC_ASSERT_OK(rdzv_val_holder_parse(rdzv_val_holder(&h).s, &back));
    XDC_ASSERT(back.generation == 2 && strcmp(back.lease, h.lease) == 0 && strcmp(back.cert, h.cert) == 0);
    XDC_ASSERT_OK(rdzv_val_holder_parse("0:12:-", &back));
    XDC_ASSERT(back.generation == 0 && strcmp(back.cert, "-") == 0);
    static const char *const bad_holder[] = {"7587888", "1:12", "1::-", "-1:12:-", "1:1x:-", "1:12:abc", "01:12:-"};
    for (size_t i = 0; i < sizeof bad_holder / sizeof bad_holder[0]; i++)
        XDC_ASSERT_MSG(rdzv_val_holder_parse(bad_holder[i], &back) == XDC_ERR_PROTO, "'%s' parsed", bad_holder[i]);
}
