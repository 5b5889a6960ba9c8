/* test_relay.c — training over a link graph that is not a full mesh, under `xdc launch`: the star of
 * examples/topology/star-3region.yaml (eu-west and ap-south linked only to us-east), in sync mode and in
 * DiLoCo (whose rounds go by quorum), and in sync mode with two replicas per region (the relay's forwards
 * between its replicas' collectives). Every region takes part, every region ends on one params_xxh64, the
 * very one the full mesh of demo-3region.yaml gives for the same run (relaying forwards the encoded shards
 * unchanged), and the relayed bytes are counted on both hops: each leaf's shards once on its own link, and
 * again in the hub's relayed bytes on the other leaf's link. */
#include "tests/xdc_test.h"
#include "tests/e2e/test_orch_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STAR "examples/topology/star-3region.yaml"
#define MESH "examples/topology/demo-3region.yaml"

/* `xdc launch` of `run` on `topo` into TMP/<name>: its final params hash into hash, the run folder into dir. */
static void launch(const char *topo, const char *run, const char *name, char hash[64], char *dir, size_t cap)
{
    static char out[65536];
    char cmd[2048];
    snprintf(dir, cap, "%s/%s", xdc_test_tmpdir(), name);
    snprintf(cmd, sizeof cmd, "timeout 120 %s launch -t %s -c %s --run-dir %s", xdc_test_bin(), topo, run, dir);
    int rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "%s exited %d:\n%s", name, rc, out);
    e2e_final_field(out, "params_xxh64=", hash, 64);
}

/* Region `region`'s logged WAN bytes (its one worker): sent, and of those relayed for other regions. */
static void wan_bytes(const char *dir, const char *region, const char *node, unsigned long long *tx,
                      unsigned long long *relay)
{
    char path[1000], key[128];
    snprintf(path, sizeof path, "%s/logs/%s-%s-0.log", dir, region, node);
    char *text = xdc_test_read_file(path, NULL);
    XDC_ASSERT_MSG(text != NULL, "no log %s", path);
    snprintf(key, sizeof key, "WAN bytes of region %s rank 0: ", region);
    const char *at = strstr(text, key);
    XDC_ASSERT_MSG(at && sscanf(at + strlen(key), "wan_tx_bytes=%llu relayed_bytes=%llu", tx, relay) == 2,
                   "%s: no WAN bytes line", path);
    free(text);
}

/* `run` on the star and on the full mesh (`topos`: their files; folders TMP/<name>-star, -mesh): the same result
 * everywhere, and the bytes of both hops (rank 0 of each region: each rank exchanges its own shards). */
static void star_as_mesh(const char *const topos[2], const char *run, const char *name)
{
    char star[64], mesh[64], dir[600], mesh_dir[600], sub[64];
    snprintf(sub, sizeof sub, "%s-star", name);
    launch(topos[0], run, sub, star, dir, sizeof dir);
    snprintf(sub, sizeof sub, "%s-mesh", name);
    launch(topos[1], run, sub, mesh, mesh_dir, sizeof mesh_dir);
    XDC_ASSERT_MSG(strcmp(star, mesh) == 0, "%s: the star ends at params_xxh64=%s, the full mesh at %s", name, star,
                   mesh);
    char h[6][17];
    int n = e2e_final_hashes(dir, h, 6);
    XDC_ASSERT_MSG(n >= 3, "%s: %d regions logged their final parameters", name, n); /* every region, to the end */
    for (int r = 0; r < n; r++)
        XDC_ASSERT_MSG(strncmp(h[r], star, 16) == 0, "%s: a region ends at %s, the run at %s", name, h[r], star);
    unsigned long long tx_hub, relay_hub, tx_west, relay_west, tx_south, relay_south;
    wan_bytes(dir, "us-east", "east-node1", &tx_hub, &relay_hub);
    wan_bytes(dir, "eu-west", "west-node1", &tx_west, &relay_west);
    wan_bytes(dir, "ap-south", "south-node1", &tx_south, &relay_south);
    printf("%s star: hub sent %llu (relayed %llu), eu-west %llu, ap-south %llu\n", name, tx_hub, relay_hub, tx_west,
           tx_south);
    /* A leaf sends its shards once, to the hub (first hop); the hub forwards them to the other leaf (second
     * hop), and sends its own to both. */
    XDC_ASSERT(relay_west == 0 && relay_south == 0 && tx_west > 0 && tx_south > 0);
    XDC_ASSERT_EQ(relay_hub, tx_west + tx_south);
    XDC_ASSERT_MSG(tx_hub > relay_hub && (tx_hub - relay_hub) % 2 == 0, "hub sent %llu, relayed %llu: not 2x its own",
                   tx_hub, relay_hub);
}

/* `path` (a topology of one worker per region) with two workers per region, into the test's folder. */
static const char *two_workers(const char *path, const char *name, char *out, size_t cap)
{
    char *text = xdc_test_read_file(path, NULL);
    XDC_ASSERT(text != NULL);
    for (char *w; (w = strstr(text, "workers_per_node: 1"));) w[strlen("workers_per_node: ")] = '2';
    snprintf(out, cap, "%s/%s", xdc_test_tmpdir(), name);
    xdc_test_write_file(out, text);
    free(text);
    return out;
}

XDC_TEST_T(relay_star_trains_every_region_to_the_full_mesh_result, 240)
{
    e2e_need_corpus();
    const char *const one[2] = {STAR, MESH};
    star_as_mesh(one, e2e_write_run_p("relay-sync", "sync", 4, "int8", 1, ""), "sync");
    star_as_mesh(one, e2e_write_run_p("relay-diloco", "diloco", 6, "int8", 1, "diloco: {inner_steps: 3}\n"), "diloco");
    char star2[600], mesh2[600];
    const char *const two[2] = {two_workers(STAR, "star2.yaml", star2, sizeof star2),
                                two_workers(MESH, "mesh2.yaml", mesh2, sizeof mesh2)};
    star_as_mesh(two, e2e_write_run_p("relay-replicas", "sync", 4, "int8", 1, ""), "replicas");
}
