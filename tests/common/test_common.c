/* test_common.c — common/: error table, diag buffers, logger, allocation fault injection, time, hash,
 * RNG, and the layering rule over the whole tree. */
#include "tests/xdc_test.h"

#include "common/xdc_alloc.h"
#include "common/xdc_err.h"
#include "common/xdc_hash.h"
#include "common/xdc_log.h"
#include "common/xdc_parse.h"
#include "common/xdc_rng.h"
#include "common/xdc_time.h"
#include "orchestrator/cli/xdc_cli.h"

#include <stdio.h>
#include <stdlib.h>

XDC_TEST(err_table_messages_and_names)
{
    XDC_ASSERT(strcmp(xdc_strerror(XDC_OK), "success") == 0);
    XDC_ASSERT(strcmp(xdc_strerror(XDC_ERR_TIMEOUT), "deadline exceeded") == 0);
    XDC_ASSERT(strcmp(xdc_errname(XDC_ERR_CONFIG), "XDC_ERR_CONFIG") == 0);
    XDC_ASSERT(strcmp(xdc_errname(XDC_ERR_INTERRUPTED), "XDC_ERR_INTERRUPTED") == 0);
    XDC_ASSERT(strcmp(xdc_strerror((xdc_err_t)-5), "unknown error") == 0);
    XDC_ASSERT(strcmp(xdc_strerror((xdc_err_t)12345), "unknown error") == 0);
    XDC_ASSERT(strcmp(xdc_errname((xdc_err_t)-1000), "XDC_ERR_UNKNOWN") == 0);
}

/* The values are part of the interface (logs, other processes): written out in the table, never
 * renumbered by a row added in the middle, and never shared by two codes. */
XDC_TEST(err_values_are_pinned_and_unique)
{
    XDC_ASSERT_EQ(XDC_OK, 0);
    XDC_ASSERT_EQ(XDC_ERR_INVALID, -999);
    XDC_ASSERT_EQ(XDC_ERR_IO, -997);
    XDC_ASSERT_EQ(XDC_ERR_CONFIG, -996);
    XDC_ASSERT_EQ(XDC_ERR_TIMEOUT, -992);
    XDC_ASSERT_EQ(XDC_ERR_UNAVAILABLE, -989);
    XDC_ASSERT_EQ(XDC_ERR_PEER_LOST, -988);
    XDC_ASSERT_EQ(XDC_ERR_INTERNAL, -982);
    XDC_ASSERT_EQ(XDC_ERR_INTERRUPTED, -981);
    static const struct {
        int value;
        const char *name;
    } rows[] = {
#define ROW_(name, value, msg) {value, "XDC_ERR_" #name},
        XDC_ERROR_TABLE(ROW_)
#undef ROW_
    };
    int n = (int)(sizeof rows / sizeof rows[0]);
    for (int i = 0; i < n; i++) {
        XDC_ASSERT_MSG(rows[i].value < 0, "%s has value %d, not negative", rows[i].name, rows[i].value);
        XDC_ASSERT_MSG(strcmp(xdc_errname((xdc_err_t)rows[i].value), rows[i].name) == 0, "%s", rows[i].name);
        XDC_ASSERT(strcmp(xdc_strerror((xdc_err_t)rows[i].value), "unknown error") != 0);
        for (int j = 0; j < i; j++)
            XDC_ASSERT_MSG(rows[i].value != rows[j].value, "%s and %s share value %d", rows[j].name, rows[i].name,
                           rows[i].value);
    }
}

/* The one xdc_err_t -> sysexits(3) mapping (orchestrator/cli/cli_exit.c); every code has one. */
XDC_TEST(cli_exit_codes_follow_sysexits)
{
    XDC_ASSERT_EQ(xdc_cli_exit_code(XDC_OK), 0);
    XDC_ASSERT_EQ(xdc_cli_exit_code(XDC_ERR_INVALID), 64);
    XDC_ASSERT_EQ(xdc_cli_exit_code(XDC_ERR_CORRUPT), 65);
    XDC_ASSERT_EQ(xdc_cli_exit_code(XDC_ERR_UNAVAILABLE), 69);
    XDC_ASSERT_EQ(xdc_cli_exit_code(XDC_ERR_PEER_LOST), 69);
    XDC_ASSERT_EQ(xdc_cli_exit_code(XDC_ERR_IO), 74);
    XDC_ASSERT_EQ(xdc_cli_exit_code(XDC_ERR_TIMEOUT), 75);
    XDC_ASSERT_EQ(xdc_cli_exit_code(XDC_ERR_INTERRUPTED), 75);
    XDC_ASSERT_EQ(xdc_cli_exit_code(XDC_ERR_CONFIG), 78);
    XDC_ASSERT_EQ(xdc_cli_exit_code((xdc_err_t)-5), 70);
#define ROW_(name, value, msg) XDC_ASSERT(xdc_cli_exit_code(XDC_ERR_##name) >= 64);
    XDC_ERROR_TABLE(ROW_)
#undef ROW_
    /* A child's own exit status passes through a failed run; a signal or a setup error maps the code. */
    XDC_ASSERT_EQ(xdc_cli_run_exit_code(XDC_ERR_PEER_LOST, 3), 3);
    XDC_ASSERT_EQ(xdc_cli_run_exit_code(XDC_ERR_PEER_LOST, 0), 69);
    XDC_ASSERT_EQ(xdc_cli_run_exit_code(XDC_OK, 0), 0);
}

static xdc_err_t fails_with_timeout(void) { return XDC_ERR_TIMEOUT; }
static xdc_err_t propagates(void)
{
    XDC_CHECK(fails_with_timeout());
    return XDC_OK;
}

XDC_TEST(check_macro_propagates_and_leaves_a_debug_trail)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    xdc_log_set_stream(mem);
    xdc_log_set_level(XDC_LOG_DEBUG);
    XDC_ASSERT_ERR(propagates(), XDC_ERR_TIMEOUT);
    xdc_log_set_stream(NULL);
    fclose(mem);
    XDC_ASSERT_STR_CONTAINS(buf, "-> XDC_ERR_TIMEOUT");
    XDC_ASSERT_STR_CONTAINS(buf, "test_common.c");
    free(buf);
}

XDC_TEST(diag_set_and_prefix_accept_null)
{
    xdc_diag d = {{0}};
    xdc_diag_set(NULL, "ignored %d", 1);
    xdc_diag_set(&d, "peer %s unreachable", "eu-west/1");
    xdc_diag_prefix(&d, "rank %d", 3);
    XDC_ASSERT(strcmp(d.msg, "rank 3: peer eu-west/1 unreachable") == 0);
}

XDC_TEST(logger_prefix_levels_subsystems_and_json)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    xdc_log_set_stream(mem);
    xdc_log_set_identity("us-east", "node1", 2);
    xdc_log_set_level(XDC_LOG_INFO);
    xdc_log_set_subsys(XDC_SUB_WAN);
    XDC_INFO(XDC_SUB_WAN, "hello %d", 7);
    XDC_INFO(XDC_SUB_INTRA, "masked out");
    XDC_DEBUG(XDC_SUB_WAN, "below level");
    XDC_ERROR(XDC_SUB_INTRA, "errors pass any mask");
    xdc_log_set_format(XDC_LOG_JSON);
    XDC_WARN(XDC_SUB_WAN, "quote \" and\nnewline");
    fflush(mem);
    XDC_ASSERT_STR_CONTAINS(buf, "[us-east/node1:2] info  hello 7\n");
    XDC_ASSERT(strstr(buf, "masked out") == NULL);
    XDC_ASSERT(strstr(buf, "below level") == NULL);
    XDC_ASSERT_STR_CONTAINS(buf, "errors pass any mask");
    XDC_ASSERT_STR_CONTAINS(buf, "\"region\":\"us-east\",\"host\":\"node1\",\"rank\":2");
    XDC_ASSERT_STR_CONTAINS(buf, "\"msg\":\"quote \\\" and\\u000anewline\"}");
    xdc_log_set_stream(NULL);
    fclose(mem);
    free(buf);
    unsigned m;
    XDC_ASSERT(xdc_log_parse_subsys("wan,intra", &m) && m == (XDC_SUB_WAN | XDC_SUB_INTRA));
    XDC_ASSERT(!xdc_log_parse_subsys("wan,bogus", &m));
    xdc_log_level l;
    XDC_ASSERT(xdc_log_parse_level("debug", &l) && l == XDC_LOG_DEBUG);
    XDC_ASSERT(!xdc_log_parse_level("loud", &l));
}

XDC_TEST(alloc_fails_the_nth_call)
{
    xdc_alloc_fail_at(3);
    void *a = xdc_malloc(16), *b = xdc_calloc(2, 8), *c = xdc_malloc(4), *d = xdc_malloc(4);
    XDC_ASSERT(a && b);
    XDC_ASSERT(c == NULL && d == NULL);
    XDC_ASSERT_EQ(xdc_alloc_count(), 4);
    xdc_alloc_fail_at(0);
    void *e = xdc_aligned_alloc(4096, 100);
    XDC_ASSERT(e && ((uintptr_t)e & 4095) == 0);
    xdc_free(a);
    xdc_free(b);
    xdc_free(e);
    xdc_free(NULL);
}

XDC_TEST(time_durations_and_deadlines)
{
    int64_t ms;
    XDC_ASSERT(xdc_parse_duration_ms("30s", &ms) == 0 && ms == 30000);
    XDC_ASSERT(xdc_parse_duration_ms("250ms", &ms) == 0 && ms == 250);
    XDC_ASSERT(xdc_parse_duration_ms("1.5", &ms) == 0 && ms == 1500);
    XDC_ASSERT(xdc_parse_duration_ms("2m", &ms) == 0 && ms == 120000);
    XDC_ASSERT(xdc_parse_duration_ms("10parsecs", &ms) != 0);
    XDC_ASSERT(xdc_parse_duration_ms("-1s", &ms) != 0);
    uint64_t a = xdc_now_ns(), b = xdc_now_ns();
    XDC_ASSERT(b >= a);
    XDC_ASSERT(xdc_deadline_passed(xdc_deadline_ms(0)));
    XDC_ASSERT(!xdc_deadline_passed(xdc_deadline_ms(-1)));
    XDC_ASSERT(xdc_deadline_poll_ms(xdc_deadline_ms(60000)) > 59000);
}

XDC_TEST(hash_matches_known_vectors_and_streams)
{
    /* XXH64("", 0) and XXH64("abc", 0) reference values from the xxHash test suite. */
    XDC_ASSERT(xdc_xxh64("", 0, 0) == 0xEF46DB3751D8E999ull);
    XDC_ASSERT(xdc_xxh64("abc", 3, 0) == 0x44BC2CF5AD770999ull);
    xdc_hash_state *s = xdc_hash64_create(0);
    xdc_hash64_update(s, "a", 1);
    xdc_hash64_update(s, "bc", 2);
    XDC_ASSERT(xdc_hash64_digest(s) == 0x44BC2CF5AD770999ull);
    xdc_hash64_destroy(s);
    xdc_hash64_destroy(NULL);
    XDC_ASSERT(xdc_xxh3("abc", 3) != xdc_xxh3("abd", 3));
    /* A state handed over mid-stream continues to the same digest. */
    xdc_hash_state *a = xdc_hash64_create(0), *b = xdc_hash64_create(7);
    unsigned char blob[XDC_HASH_STATE_BYTES];
    xdc_hash64_update(a, "a", 1);
    xdc_hash64_export(a, blob);
    xdc_hash64_import(b, blob);
    xdc_hash64_update(b, "bc", 2);
    XDC_ASSERT(xdc_hash64_digest(b) == 0x44BC2CF5AD770999ull);
    xdc_hash64_destroy(a);
    xdc_hash64_destroy(b);
}

XDC_TEST(rng_is_deterministic_and_roughly_uniform)
{
    xdc_rng a, b;
    xdc_rng_seed(&a, 42);
    xdc_rng_seed(&b, 42);
    for (int i = 0; i < 100; i++) XDC_ASSERT(xdc_rng_u64(&a) == xdc_rng_u64(&b));
    double sum = 0, sq = 0;
    int n = 20000;
    for (int i = 0; i < n; i++) {
        float x = xdc_rng_normal(&a);
        sum += x;
        sq += (double)x * x;
    }
    XDC_ASSERT_NEAR(sum / n, 0.0, 0.05);
    XDC_ASSERT_NEAR(sq / n, 1.0, 0.05);
    for (int i = 0; i < 1000; i++) XDC_ASSERT(xdc_rng_below(&a, 7) < 7);
}

XDC_TEST(layering_includes_follow_dependency_rule)
{
    char out[8192];
    int rc = xdc_test_run("bash tests/check_layers.sh", out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "layering violations:\n%s", out);
}

/* The check itself must fail on a violation: a scratch tree with this repository's table and link order,
 * where common/ (the bottom) includes the sync header and topology/ includes a header of no library.
 * Then the same tree with the Makefile's link order reversed, which must fail for the link order alone. */
XDC_TEST(layering_check_catches_an_upward_include)
{
    char cmd[4096], out[8192];
    const char *t = xdc_test_tmpdir();
    snprintf(cmd, sizeof cmd,
             "set -e; cd %1$s; mkdir -p docs common sync topology; cp \"$OLDPWD/docs/design.md\" docs/; "
             "cp \"$OLDPWD/Makefile\" .; printf '#include \"sync/xdc_sync.h\"\\n' > common/xdc_up.h; "
             "printf '#include \"common/xdc_err.h\"\\n' > sync/xdc_ok.h; "
             "printf '#include \"nowhere/x.h\"\\n' > topology/xdc_lost.h",
             t);
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 0);
    snprintf(cmd, sizeof cmd, "bash tests/check_layers.sh %s", t);
    int rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 1, "check exited %d on a planted violation:\n%s", rc, out);
    XDC_ASSERT_STR_CONTAINS(out, "common/xdc_up.h:1: includes \"sync/xdc_sync.h\" but common/ may only depend on");
    XDC_ASSERT_STR_CONTAINS(out, "topology/xdc_lost.h:1: includes \"nowhere/x.h\", which is in no library folder");
    XDC_ASSERT(strstr(out, "sync/xdc_ok.h") == NULL);
    XDC_ASSERT(strstr(out, "LAYERS") == NULL);

    snprintf(cmd, sizeof cmd,
             "cd %1$s && rm common/xdc_up.h topology/xdc_lost.h && "
             "sed -i 's#^LAYERS := .*#LAYERS := common kernels config topology compression wan wan/emu intra model "
             "sync scheduler "
             "orchestrator/obs orchestrator/rdzv orchestrator/runcfg orchestrator/elastic orchestrator/launch "
             "orchestrator/member orchestrator/worker "
             "orchestrator/doctor orchestrator/api orchestrator/cli#; /^          orchestrator\\/runcfg/d; /^          "
             "intra wan/d' "
             "Makefile",
             t);
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 0);
    snprintf(cmd, sizeof cmd, "bash tests/check_layers.sh %s", t);
    rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 1, "check exited %d on a reversed link order:\n%s", rc, out);
    XDC_ASSERT_STR_CONTAINS(out, "Makefile: LAYERS puts common before config, which depends on it");
}

XDC_TEST(parse_integers_whole_string_and_range)
{
    int64_t v = 7;
    int i = 7;
    xdc_diag d;
    XDC_ASSERT_OK(xdc_parse_i64("-9223372036854775808", INT64_MIN, INT64_MAX, &v, &d));
    XDC_ASSERT(v == INT64_MIN);
    XDC_ASSERT_OK(xdc_parse_i64("9223372036854775807", 0, INT64_MAX, &v, &d));
    XDC_ASSERT(v == INT64_MAX);
    static const char *const bad[] = {"",   "-", "+1", " 1", "1 ", "1x", "0x10", "1e3", "1.0", "9223372036854775808",
                                      "--1"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        XDC_ASSERT_ERR(xdc_parse_i64(bad[k], INT64_MIN, INT64_MAX, &v, &d), XDC_ERR_INVALID);
        XDC_ASSERT(v == INT64_MAX); /* untouched */
    }
    XDC_ASSERT_ERR(xdc_parse_i64(NULL, 0, 1, &v, &d), XDC_ERR_INVALID);
    XDC_ASSERT_ERR(xdc_parse_int("65536", 0, 65535, &i, &d), XDC_ERR_INVALID);
    XDC_ASSERT(strcmp(d.msg, "'65536' is not an integer in 0..65535") == 0 && i == 7);
    XDC_ASSERT_OK(xdc_parse_int("-5", -5, 5, &i, &d));
    XDC_ASSERT(i == -5);
    char host[16];
    int port = 0;
    XDC_ASSERT_OK(xdc_parse_host_port("[::1]:29501", host, sizeof host, &port, &d));
    XDC_ASSERT(strcmp(host, "[::1]") == 0 && port == 29501);
    static const char *const bad_ep[] = {"h:29501abc", "h:", ":1", "h", "h:0", "h:65536", "averyveryverylonghost:1"};
    for (size_t k = 0; k < sizeof bad_ep / sizeof bad_ep[0]; k++)
        XDC_ASSERT_ERR(xdc_parse_host_port(bad_ep[k], host, sizeof host, &port, &d), XDC_ERR_INVALID);
    XDC_ASSERT_STR_CONTAINS(d.msg, "'averyveryverylonghost:1' is not HOST:PORT");
}
