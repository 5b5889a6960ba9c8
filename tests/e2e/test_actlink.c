/* test_actlink.c — a pipeline across three regions with an activation codec per cut, end to end
 * (examples/topology/span-3region.yaml: int8 on us-east - eu-west, lowrank on eu-west - ap-south, each named by
 * its topology link): it trains, each worker logs its cuts' codecs, and it ends on the same parameters as the
 * run whose second cut takes lowrank from the run file instead (a link without activation_codec), so both
 * sides of each cut derive one codec and a link's own beats the run file's. Interleaved 1F1B refuses a
 * lowrank cut by the cut's name. */
#include "tests/xdc_test.h"
#include "tests/e2e/test_orch_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SPAN3 "examples/topology/span-3region.yaml"
#define STEPS 20

/* Launches `topo` with the run file's activation_codec `codec` into TMP/<name>; its output, val_loss and hash. */
static void run3(const char *name, const char *topo, const char *codec, char *out, size_t cap, double *val,
                 char hash[64])
{
    char extra[512], dir[600], cmd[2048], field[64];
    snprintf(extra, sizeof extra, "model: %s\nspan_regions: true\nactivation_codec: %s\n", e2e_write_tiny(3, 16),
             codec);
    const char *run = e2e_write_run_p(name, "sync", STEPS, "none", 3, extra);
    snprintf(dir, sizeof dir, "%s/%s", xdc_test_tmpdir(), name);
    snprintf(cmd, sizeof cmd, "timeout 240 %s launch -t %s -c %s --run-dir %s --device cpu", xdc_test_bin(), topo, run,
             dir);
    int rc = xdc_test_run(cmd, out, cap);
    XDC_ASSERT_MSG(rc == 0, "%s exited %d:\n%s", name, rc, out);
    e2e_final_field(out, "val_loss=", field, sizeof field);
    *val = atof(field);
    e2e_final_field(out, "params_xxh64=", hash, 64);
}

XDC_TEST_T(actlink_each_cut_runs_its_links_codec, 300)
{
    e2e_need_corpus();
    static char out[65536];
    char by_link[64], by_run[64], src[600], topo[600];
    double v_link, v_run;
    run3("actlink-links", SPAN3, "bf16", out, sizeof out, &v_link, by_link);
    /* The middle stage holds one codec per neighbour: its log names both cuts' (orch_worker.c open_link_codec). */
    char log[700];
    snprintf(log, sizeof log, "%s/actlink-links/logs/eu-west-west-node1-0.log", xdc_test_tmpdir());
    char *mid = xdc_test_read_file(log, NULL);
    XDC_ASSERT_MSG(mid != NULL, "no log %s", log);
    XDC_ASSERT_STR_CONTAINS(mid, "activation codec int8 on the cut eu-west - us-east");
    XDC_ASSERT_STR_CONTAINS(mid, "activation codec lowrank on the cut eu-west - ap-south");
    free(mid);
    /* The same topology without the second link's activation_codec: that cut takes the run file's. */
    char *text = xdc_test_read_file(xdc_test_src(SPAN3, src, sizeof src), NULL);
    XDC_ASSERT(text != NULL);
    char *at = strstr(text, ", activation_codec: lowrank");
    XDC_ASSERT(at != NULL);
    memmove(at, at + strlen(", activation_codec: lowrank"), strlen(at + strlen(", activation_codec: lowrank")) + 1);
    snprintf(topo, sizeof topo, "%s/span3-run-codec.yaml", xdc_test_tmpdir());
    xdc_test_write_file(topo, text);
    free(text);
    run3("actlink-run", topo, "lowrank", out, sizeof out, &v_run, by_run);
    printf("step %d: codecs by link val_loss %.4f params %s; second cut by the run file val_loss %.4f params %s\n",
           STEPS, v_link, by_link, v_run, by_run);
    XDC_ASSERT_MSG(strcmp(by_link, by_run) == 0, "the cuts' codecs by link end at %s, by the run file at %s", by_link,
                   by_run);
    /* It trains: the byte-level model starts at ln 256 = 5.55. */
    XDC_ASSERT_MSG(v_link < 5.0, "val_loss %.4f after %d steps", v_link, STEPS);
}

/* span-2region with `activation_codec: lowrank` on its link and pipeline_chunks 2: the run file's bf16 is allowed,
 * the link's lowrank is not, and the worker names the cut (orch_worker.c open_link_codec). */
XDC_TEST_T(actlink_interleaved_refuses_a_lowrank_cut_by_name, 120)
{
    e2e_need_corpus();
    static char out[65536];
    char src[600], topo[600], extra[512], dir[600], cmd[2048];
    char *text = xdc_test_read_file(xdc_test_src("examples/topology/span-2region.yaml", src, sizeof src), NULL);
    XDC_ASSERT(text != NULL);
    char *end = strstr(text, "codec: bf16}");
    XDC_ASSERT(end != NULL);
    end[strlen("codec: bf16")] = '\0';
    snprintf(topo, sizeof topo, "%s/span2-lowrank.yaml", xdc_test_tmpdir());
    static char y[8192];
    snprintf(y, sizeof y, "%s, activation_codec: lowrank}\n", text);
    xdc_test_write_file(topo, y);
    free(text);
    snprintf(extra, sizeof extra, "model: %s\npipeline_chunks: 2\nspan_regions: true\nactivation_codec: bf16\n",
             e2e_write_tiny(4, 10));
    const char *run = e2e_write_run_pb("actlink-ileave", "sync", 1, "none", 2, 0.05, extra);
    snprintf(dir, sizeof dir, "%s/actlink-ileave", xdc_test_tmpdir());
    snprintf(cmd, sizeof cmd, "timeout 120 %s launch -t %s -c %s --run-dir %s", xdc_test_bin(), topo, run, dir);
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 78);
    /* whichever side of the cut stops first, the launch names it */
    XDC_ASSERT_STR_CONTAINS(out, "pipeline_chunks 2 with activation_codec lowrank on the cut ");
    XDC_ASSERT_MSG(strstr(out, "cut us-east - eu-west is not built") ||
                       strstr(out, "cut eu-west - us-east is not built"),
                   "the cut is not named in:\n%s", out);
}
