/* test_hostile_rdzv.c — a member holding a valid certificate of the run (issued as the launcher issues
 * them: one CA, one certificate per region and rank) attacks the rendezvous: requests before join, joins
 * as someone else, writes of other members' and run-wide keys, barrier arrivals that die or repeat,
 * malformed messages, thousands of sessions. Each attack must be refused or contained, leave a log line
 * naming the member, and leave the store serving the honest members. */
#include "tests/test_run_util.h"
#include "tests/test_wan_util.h"
#include "tests/xdc_test.h"

#include "common/xdc_log.h"
#include "common/xdc_time.h"
#include "orchestrator/rdzv/orch_rdzv.h"
#include "orchestrator/rdzv/orch_rdzv_quota.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define N 4 /* members of the run */

static const char *const NAMES[N] = {"us-east/east-node1:0", "us-east/east-node1:1", "eu-west/west-node1:0",
                                     "eu-west/west-node1:1"};

typedef struct {
    wan_test_node node[N], srv_node;
    xdc_wan_engine *eng[N], *srv_eng; /* eng[i]: member i's certificate */
    rdzv_server *srv;
    int port;
    char log[600];
    FILE *logf;
} hostile;

/* Certificates in DIR (under the test folder) and one engine per member. */
static void hostile_certs(hostile *h, const char *dir)
{
    memset(h, 0, sizeof *h);
    wan_test_issue(dir, RDZV_SERVER_REGION, 0, 30, -60, &h->srv_node);
    for (int i = 0; i < N; i++) wan_test_issue(dir, i < 2 ? "us-east" : "eu-west", i % 2, 30, -60, &h->node[i]);
    for (int i = 0; i < N; i++) h->eng[i] = wan_test_engine(&h->node[i], 1, 10000);
}

/* Certificates, engines, a store expecting NAMES with the launcher's grants (2 pipeline stages: the
 * result comes from NAMES[1]); the log goes to a file the test reads. */
static void hostile_open(hostile *h)
{
    hostile_certs(h, "certs");
    h->srv_eng = wan_test_engine(&h->srv_node, 1, 10000);
    snprintf(h->log, sizeof h->log, "%s/rdzv.log", xdc_test_tmpdir());
    h->logf = fopen(h->log, "w");
    XDC_ASSERT(h->logf != NULL);
    setvbuf(h->logf, NULL, _IONBF, 0); /* each line is in the file when the logger returns */
    xdc_log_set_stream(h->logf);
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(rdzv_server_create(h->srv_eng, "127.0.0.1", 0, NAMES, N, &h->srv, &d));
    XDC_ASSERT_OK(rdzv_server_grant(h->srv, "finished", NAMES[0], &d));
    XDC_ASSERT_OK(rdzv_server_grant(h->srv, "replan/", NAMES[0], &d));
    XDC_ASSERT_OK(rdzv_server_grant(h->srv, "result", NAMES[1], &d));
    h->port = rdzv_server_port(h->srv);
}

static void hostile_close(hostile *h)
{
    rdzv_server_destroy(h->srv);
    for (int i = 0; i < N; i++) xdc_wan_engine_destroy(h->eng[i]);
    xdc_wan_engine_destroy(h->srv_eng);
    if (h->logf) {
        xdc_log_set_stream(NULL);
        fclose(h->logf);
    }
}

/* The log must hold a line with both `who` and `what`. */
static void assert_logged(hostile *h, const char *who, const char *what)
{
    char *text = xdc_test_read_file(h->log, NULL);
    int found = 0;
    for (char *line = text ? strtok(text, "\n") : NULL; line && !found; line = strtok(NULL, "\n"))
        found = strstr(line, who) && strstr(line, what);
    XDC_ASSERT_MSG(found, "no log line naming %s with '%s' in:\n%s", who, what, text ? text : "(no log)");
    free(text);
}

/* A bare connection with member i's certificate; nothing sent yet. */
static xdc_wan_peer *raw_open(hostile *h, int i)
{
    xdc_wan_peer *p;
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(xdc_wan_connect(h->eng[i], "127.0.0.1", h->port, RDZV_SERVER_REGION, 0, &p, &d));
    XDC_ASSERT_OK(xdc_wan_peer_wait_ready(p, 10000, &d));
    return p;
}

static xdc_err_t raw_send(xdc_wan_peer *p, const void *msg, size_t len)
{
    xdc_wan_request *r;
    xdc_diag d = {{0}};
    xdc_err_t rc = xdc_wan_isend(p, XDC_WAN_LATENCY, msg, len, 0, len, &r);
    return rc == XDC_OK ? xdc_wan_wait(r, 10000, NULL, NULL, &d) : rc;
}

/* Send `len` bytes of `msg` and wait for the reply (NUL-terminated into reply[cap]): XDC_OK, or
 * XDC_ERR_CLOSED when the server closed the connection instead of answering. */
static xdc_err_t raw_call(xdc_wan_peer *p, const void *msg, size_t len, char *reply, size_t cap)
{
    xdc_wan_request *r;
    xdc_diag d = {{0}};
    size_t n = 0;
    reply[0] = '\0';
    xdc_err_t rc = xdc_wan_irecv(p, XDC_WAN_LATENCY, reply, cap - 1, &r);
    if (rc != XDC_OK) return rc;
    rc = raw_send(p, msg, len);
    xdc_err_t got = xdc_wan_wait(r, 10000, &n, NULL, &d);
    if (got == XDC_ERR_AGAIN) xdc_wan_request_cancel(r); /* still posted: give it up */
    if (got == XDC_OK) reply[n] = '\0';
    return got != XDC_OK ? got : rc;
}

static xdc_err_t raw_text(xdc_wan_peer *p, const char *msg, char *reply, size_t cap)
{
    return raw_call(p, msg, strlen(msg), reply, cap);
}

static xdc_wan_peer *raw_join(hostile *h, int i)
{
    char msg[256], reply[512];
    xdc_wan_peer *p = raw_open(h, i);
    snprintf(msg, sizeof msg, "{\"op\":\"join\",\"member\":\"%s\"}", NAMES[i]);
    XDC_ASSERT_OK(raw_text(p, msg, reply, sizeof reply));
    XDC_ASSERT_STR_CONTAINS(reply, "\"ok\":true");
    return p;
}

static rdzv_client *member(hostile *h, int i)
{
    rdzv_client *c;
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(rdzv_client_create(h->eng[i], "127.0.0.1", h->port, NAMES[i], 10000, &c, &d));
    return c;
}

/* Wait (bounded) until the store serves `n` connections: it has seen the others leave. */
static void await_connections(hostile *h, int n)
{
    for (int t = 0; t < 2000 && rdzv_server_connections(h->srv) != n; t++)
        nanosleep(&(struct timespec){0, 5 * 1000000L}, NULL);
    XDC_ASSERT_EQ(rdzv_server_connections(h->srv), n);
}

/* Before join nothing works and the connection is closed; a join must be an expected member whose region
 * and rank are the certificate's; a connection joins once. */
XDC_TEST_T(hostile_rdzv_nothing_before_join_and_no_join_as_another, 60)
{
    hostile h;
    hostile_open(&h);
    char reply[512], val[64];
    static const char *const before[] = {"{\"op\":\"set\",\"key\":\"finished\",\"value\":\"1\"}",
                                         "{\"op\":\"get\",\"key\":\"wan/0/0\"}",
                                         "{\"op\":\"barrier\",\"key\":\"start\",\"count\":1,\"timeout_ms\":0}",
                                         "{\"op\":\"heartbeat\",\"status\":\"hi\"}"};
    for (int k = 0; k < 4; k++) {
        xdc_wan_peer *p = raw_open(&h, 0);
        XDC_ASSERT_OK(raw_text(p, before[k], reply, sizeof reply));
        XDC_ASSERT_STR_CONTAINS(reply, "before join");
        XDC_ASSERT_ERR(raw_text(p, "{\"op\":\"heartbeat\"}", reply, sizeof reply), XDC_ERR_CLOSED);
        xdc_wan_peer_close(p);
    }
    assert_logged(&h, "certificate us-east/0 (not joined)", "set before joining; closing");
    assert_logged(&h, "certificate us-east/0 (not joined)", "barrier before joining; closing");
    XDC_ASSERT(rdzv_server_get(h.srv, "finished", val, sizeof val) == -1);

    /* us-east/0's certificate as us-east/1, as a host the run does not have, as eu-west/0, as nonsense. */
    static const char *const as[] = {"us-east/east-node1:1", "us-east/evil:0", "eu-west/west-node1:0", "us-east:0",
                                     "us-east/east-node1:00x"};
    static const char *const why[] = {"not the certificate's", "no member of this run has that name",
                                      "not the certificate's", "is not region/host:rank", "is not region/host:rank"};
    for (int k = 0; k < 5; k++) {
        rdzv_client *c;
        xdc_diag d = {{0}};
        XDC_ASSERT_ERR(rdzv_client_create(h.eng[0], "127.0.0.1", h.port, as[k], 10000, &c, &d), XDC_ERR_AUTH);
        XDC_ASSERT_STR_CONTAINS(d.msg, why[k]);
        assert_logged(&h, as[k], why[k]);
    }
    /* A second join on a joined connection is refused and ends it. */
    xdc_wan_peer *p = raw_join(&h, 0);
    XDC_ASSERT_OK(raw_text(p, "{\"op\":\"join\",\"member\":\"us-east/east-node1:0\"}", reply, sizeof reply));
    XDC_ASSERT_STR_CONTAINS(reply, "joined already");
    XDC_ASSERT_ERR(raw_text(p, "{\"op\":\"heartbeat\"}", reply, sizeof reply), XDC_ERR_CLOSED);
    xdc_wan_peer_close(p);
    /* The honest member still joins. */
    rdzv_client_destroy(member(&h, 1));
    hostile_close(&h);
}

/* A joined member writes its own keys only: every other member's key and every run-wide key is refused,
 * logged with its name, and not stored; the owners still write theirs. */
XDC_TEST_T(hostile_rdzv_member_writes_only_its_own_keys, 60)
{
    hostile h;
    hostile_open(&h);
    rdzv_client *evil = member(&h, 2); /* eu-west/west-node1:0: region index 1, rank 0 */
    static const char *const theirs[] = {"finished",       "result",
                                         "replan/5",       "failed/us-east/east-node1:0",
                                         "wan/0/0",        "wan/1/1",
                                         "stats/0/0",      "metrics/us-east/0",
                                         "intra/us-east",  "device/us-east",
                                         "relay/0/1/0",    "abort",
                                         "wan/1/0/x",      "failed/eu-west/west-node1:1",
                                         "ckpt/0/0",       "intra/us-east/1",
                                         "intra/eu-west/", "intra/eu-west/1x"};
    char val[64];
    xdc_diag d = {{0}};
    for (size_t k = 0; k < sizeof theirs / sizeof theirs[0]; k++) {
        XDC_ASSERT_ERR(rdzv_set(evil, theirs[k], "0.0 0 0 0", &d), XDC_ERR_AUTH);
        XDC_ASSERT_STR_CONTAINS(d.msg, "is not eu-west/west-node1:0's to write");
        XDC_ASSERT_MSG(rdzv_server_get(h.srv, theirs[k], val, sizeof val) == -1, "%s was stored", theirs[k]);
        char what[300];
        snprintf(what, sizeof what, "write of key '%s'", theirs[k]);
        assert_logged(&h, "eu-west/west-node1:0", what);
    }
    static const char *const mine[] = {
        "wan/1/0",       "stats/1/0",      "ckpt/1/0",       "metrics/eu-west/0", "failed/eu-west/west-node1:0",
        "intra/eu-west", "device/eu-west", "intra/eu-west/2"}; /* the last: its bootstrap after it left twice */
    for (size_t k = 0; k < sizeof mine / sizeof mine[0]; k++) XDC_ASSERT_OK(rdzv_set(evil, mine[k], "x:1", &d));
    /* A barrier for fewer than the run's members would release the honest ones early. */
    XDC_ASSERT_ERR(rdzv_barrier(evil, "start", 1, 100, &d), XDC_ERR_AUTH);
    XDC_ASSERT_STR_CONTAINS(d.msg, "for all 4 members of the run, not 1");
    rdzv_client_destroy(evil);
    /* Rank 1 of us-east owns result but not finished; rank 0 owns finished and replan/. */
    rdzv_client *r1 = member(&h, 1), *r0 = member(&h, 0);
    XDC_ASSERT_OK(rdzv_set(r1, "result", "1.0 0 1 1", &d));
    XDC_ASSERT_ERR(rdzv_set(r1, "finished", "1", &d), XDC_ERR_AUTH);
    XDC_ASSERT_ERR(rdzv_set(r1, "intra/us-east", "x", &d), XDC_ERR_AUTH);
    XDC_ASSERT_ERR(rdzv_set(r1, "intra/us-east/1", "x", &d), XDC_ERR_AUTH);
    XDC_ASSERT_OK(rdzv_set(r0, "replan/5", "-", &d));
    XDC_ASSERT_OK(rdzv_set(r0, "finished", "1", &d));
    XDC_ASSERT(rdzv_server_get(h.srv, "finished", val, sizeof val) == 0 && strcmp(val, "1") == 0);
    rdzv_client_destroy(r0);
    rdzv_client_destroy(r1);
    hostile_close(&h);
}

/* Three members arrive at a 4-member barrier and vanish, or time out: their arrivals are withdrawn, so
 * the fourth does not pass alone; a member arriving twice counts once; all four honest ones pass. */
XDC_TEST_T(hostile_rdzv_dead_or_repeated_arrivals_do_not_release_a_barrier, 60)
{
    hostile h;
    hostile_open(&h);
    xdc_wan_peer *dead[3];
    for (int i = 0; i < 3; i++) {
        dead[i] = raw_join(&h, i);
        const char *msg = "{\"op\":\"barrier\",\"key\":\"start\",\"count\":4,\"timeout_ms\":60000}";
        XDC_ASSERT_OK(raw_send(dead[i], msg, strlen(msg)));
    }
    for (int i = 0; i < 3; i++) xdc_wan_peer_close(dead[i]);
    await_connections(&h, 0);
    rdzv_client *last = member(&h, 3);
    xdc_diag d = {{0}};
    XDC_ASSERT_ERR(rdzv_barrier(last, "start", N, 300, &d), XDC_ERR_UNAVAILABLE);
    XDC_ASSERT_STR_CONTAINS(d.msg, "1 of 4 arrived");
    XDC_ASSERT_STR_CONTAINS(d.msg, "us-east/east-node1:0");
    XDC_ASSERT_STR_CONTAINS(d.msg, "connection lost");

    /* Timed-out arrivals are withdrawn too: one by one, each alone. */
    rdzv_client *c[N];
    for (int i = 0; i < N; i++) c[i] = i == 3 ? last : member(&h, i);
    for (int i = 0; i < N; i++) {
        XDC_ASSERT_ERR(rdzv_barrier(c[i], "later", N, 100, &d), XDC_ERR_UNAVAILABLE);
        XDC_ASSERT_STR_CONTAINS(d.msg, "1 of 4 arrived");
    }
    /* The same member on a second connection while its first waits: refused, counted once. */
    xdc_wan_peer *again = raw_join(&h, 0);
    const char *msg = "{\"op\":\"barrier\",\"key\":\"twice\",\"count\":4,\"timeout_ms\":60000}";
    XDC_ASSERT_OK(raw_send(again, msg, strlen(msg)));
    rdzv_client *second = member(&h, 0);
    XDC_ASSERT_ERR(rdzv_barrier(second, "twice", N, 5000, &d), XDC_ERR_AUTH);
    XDC_ASSERT_STR_CONTAINS(d.msg, "us-east/east-node1:0 has arrived already");
    xdc_wan_peer_close(again);
    rdzv_client_destroy(second);
    await_connections(&h, N);
    hostile_close(&h);
}

/* Four honest members pass a barrier together (the attacks above did not break it). */
typedef struct {
    rdzv_client *c;
    xdc_err_t rc;
} arrive_ctx;

static void *arrive(void *arg)
{
    arrive_ctx *a = arg;
    xdc_diag d = {{0}};
    a->rc = rdzv_barrier(a->c, "together", N, 20000, &d);
    return NULL;
}

static void pass_barrier_together(hostile *h)
{
    arrive_ctx a[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        a[i].c = member(h, i);
        pthread_create(&th[i], NULL, arrive, &a[i]);
    }
    for (int i = 0; i < N; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < N; i++) {
        XDC_ASSERT_OK(a[i].rc);
        rdzv_client_destroy(a[i].c);
    }
}

/* Not JSON, JSON nested deep, a nested field, a wrong type, an unknown field, 8 KiB, a request sent while
 * one is pending: each is logged with the member's name and its connection closed (without a reply to
 * the bad message); the store goes on serving. */
XDC_TEST_T(hostile_rdzv_malformed_messages_close_the_connection, 60)
{
    hostile h;
    hostile_open(&h);
    static char deep[6100], deep_small[4100], big[8192];
    for (int i = 0; i < 3000; i++) deep[i] = '[', deep[3000 + i] = ']';
    for (int i = 0; i < 2000; i++) deep_small[i] = '{', deep_small[2000 + i] = '}';
    memset(big, 'x', sizeof big);
    memcpy(big, "{\"op\":\"set\",\"key\":\"wan/0/0\",\"value\":\"", 37);
    memcpy(big + sizeof big - 2, "\"}", 2);
    const struct {
        const char *msg;
        size_t len; /* bytes; 0: strlen(msg) */
        const char *why;
    } bad[] = {
        {"hello, store", 0, "not valid JSON"},
        {deep, 6000, "is 6000 bytes, the receive buffer holds"}, /* the transport refuses it: too long */
        {deep_small, 4000, "nested value at byte 1"},
        {"{\"op\":\"set\",\"key\":{\"a\":1},\"value\":\"v\"}", 0, "nested value"},
        {"{\"op\":\"set\",\"key\":7,\"value\":\"v\"}", 0, "field 'key' must be a string"},
        {"{\"op\":\"get\",\"key\":\"a\",\"evil\":\"x\"}", 0, "get takes no field 'evil'"},
        {"{\"op\":\"get\",\"key\":\"a b\"}", 0, "outside printable ASCII"},
        {"{\"op\":\"barrier\",\"key\":\"b\",\"count\":99999,\"timeout_ms\":1}", 0, "must be an integer in 1..1024"},
        {big, sizeof big, "is 8192 bytes, the receive buffer holds"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        xdc_wan_peer *p = raw_join(&h, 1);
        char reply[512];
        XDC_ASSERT_MSG(raw_call(p, bad[k].msg, bad[k].len ? bad[k].len : strlen(bad[k].msg), reply, sizeof reply) ==
                           XDC_ERR_CLOSED,
                       "message %zu got a reply: %s", k, reply);
        xdc_wan_peer_close(p);
        assert_logged(&h, "closing the connection of us-east/east-node1:1", bad[k].why);
    }
    /* A second request while the first is parked breaks the one-at-a-time rule: the first is answered
     * (its wait ends), then the connection closes. */
    xdc_wan_peer *q = raw_join(&h, 3);
    const char *parked = "{\"op\":\"barrier\",\"key\":\"start\",\"count\":4,\"timeout_ms\":60000}";
    char first[512];
    XDC_ASSERT_OK(raw_send(q, parked, strlen(parked)));
    XDC_ASSERT_OK(raw_text(q, "{\"op\":\"heartbeat\"}", first, sizeof first));
    XDC_ASSERT_STR_CONTAINS(first, "barrier 'start': 1 of 4 arrived");
    XDC_ASSERT_ERR(raw_text(q, "{\"op\":\"heartbeat\"}", first, sizeof first), XDC_ERR_CLOSED);
    xdc_wan_peer_close(q);
    assert_logged(&h, "eu-west/west-node1:1", "sent a request while one was pending; closing");
    /* Before join the certificate names the culprit. */
    xdc_wan_peer *p = raw_open(&h, 2);
    char reply[512];
    XDC_ASSERT_ERR(raw_text(p, "not json", reply, sizeof reply), XDC_ERR_CLOSED);
    xdc_wan_peer_close(p);
    assert_logged(&h, "certificate eu-west/0 (not joined)", "not valid JSON");
    pass_barrier_together(&h);
    hostile_close(&h);
}

/* Sessions from env XDC_HOSTILE_SESSIONS (a manual run shows the issue's 3,000), else `dflt`. */
static int hostile_sessions(int dflt)
{
    const char *v = getenv("XDC_HOSTILE_SESSIONS");
    return v && atoi(v) > 0 ? atoi(v) : dflt;
}

/* A field of /proc/PID/status ("Threads", "VmRSS" in kB) of process `pid` (0: this one). */
static long proc_status(pid_t pid, const char *field)
{
    char path[64], name[40];
    snprintf(path, sizeof path, pid ? "/proc/%d/status" : "/proc/self/status", (int)pid);
    snprintf(name, sizeof name, "\n%s:", field);
    char *text = xdc_test_read_file(path, NULL);
    const char *at = text ? strstr(text, name) : NULL;
    long n = at ? atol(at + strlen(name)) : -1;
    free(text);
    return n;
}

/* 2,000 sessions from one member — joined and left, left without joining, malformed, refused writes —
 * are more than the store's 1,024 connection slots: it must give each back, keep its thread count, and
 * still admit the run's members afterwards. */
XDC_TEST_T(hostile_rdzv_survives_2000_sessions_and_still_admits_members, 300)
{
    hostile h;
    hostile_open(&h);
    long threads0 = proc_status(0, "Threads");
    int answered = 0, closed = 0; /* of the sessions that sent a request */
    for (int s = 0; s < 2000; s++) {
        xdc_wan_peer *p = s % 4 == 0 ? raw_open(&h, 1) : raw_join(&h, 1);
        char reply[512];
        xdc_err_t rc = XDC_ERR_INVALID;
        switch (s % 4) {
        case 0: rc = raw_text(p, "{\"op\":\"set\",\"key\":\"finished\",\"value\":\"1\"}", reply, sizeof reply); break;
        case 1: rc = raw_text(p, "{\"op\":\"set\",\"key\":\"finished\",\"value\":\"1\"}", reply, sizeof reply); break;
        case 2: rc = raw_text(p, "[[[[[[[[", reply, sizeof reply); break;
        default: break; /* joined, then leaves */
        }
        answered += rc == XDC_OK;
        closed += rc == XDC_ERR_CLOSED;
        xdc_wan_peer_close(p);
        /* Keep within the certificate's share of connections while the store notices the ends. */
        if (rdzv_server_connections(h.srv) >= 4) await_connections(&h, 0);
    }
    await_connections(&h, 0);
    long threads1 = proc_status(0, "Threads");
    printf("2000 sessions: %d answered, %d closed by the store; threads %ld -> %ld; slots in use %d\n", answered,
           closed, threads0, threads1, rdzv_server_slots(h.srv));
    XDC_ASSERT_EQ(answered, 1000); /* refusals: 500 before join (then closed), 500 writes of 'finished' */
    XDC_ASSERT_EQ(closed, 500);    /* the malformed ones: no reply */
    XDC_ASSERT_MSG(threads1 <= threads0 + 4, "threads grew from %ld to %ld", threads0, threads1);
    char val[16];
    XDC_ASSERT(rdzv_server_get(h.srv, "finished", val, sizeof val) == -1);
    pass_barrier_together(&h);
    XDC_ASSERT_MSG(rdzv_server_slots(h.srv) <= 2 * N, "%d slots in use after %d members left", rdzv_server_slots(h.srv),
                   N);
    hostile_close(&h);
}

/* The real `xdc coordinator`, in its own process with the certificates issued here in its run folder,
 * takes 2,000 sessions from one certificate that the store ends itself (requests before join, malformed
 * messages): it keeps running with its thread count, says who it refused, and the members still join. */
XDC_TEST_T(hostile_rdzv_coordinator_process_survives_2000_sessions, 300)
{
    const char *data = "/usr/share/games/fortunes";
    if (access(data, R_OK) != 0) xdc_test_skip("no corpus at %s (Debian package fortunes)", data);
    char dir[600], run[700], log[700], text[1024], cwd[400];
    snprintf(dir, sizeof dir, "%s/run", xdc_test_tmpdir());
    snprintf(run, sizeof run, "%s/run.yaml", xdc_test_tmpdir());
    snprintf(log, sizeof log, "%s/coordinator.log", xdc_test_tmpdir());
    if (!getcwd(cwd, sizeof cwd)) XDC_FAIL("getcwd");
    snprintf(text, sizeof text,
             "model: %s/examples/models/tiny.yaml\ndata: %s\nmode: sync\npipeline_stages: 2\n"
             "timeouts: {rendezvous: 600s}\n",
             cwd, data);
    xdc_test_write_file(run, text);
    mkdir(dir, 0755);
    hostile h;
    hostile_certs(&h, "run/certs"); /* the run id of the test certificates is "testrun" */
    pid_t coord = fork();
    if (coord == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        execl(xdc_test_bin(), xdc_test_bin(), "coordinator", "-t", "examples/topology/demo-2region.yaml", "-c", run,
              "--run-dir", dir, "--run-id", "testrun", "--host", "127.0.0.1", "--port", "0", (char *)NULL);
        _exit(127);
    }
    for (int t = 0; t < 1000 && !h.port; t++) {
        char *out = xdc_test_read_file(log, NULL);
        const char *at = out ? strstr(out, "--coordinator 127.0.0.1:") : NULL;
        h.port = at ? atoi(at + 24) : 0;
        free(out);
        if (!h.port) nanosleep(&(struct timespec){0, 10 * 1000000L}, NULL);
    }
    XDC_ASSERT_MSG(h.port > 0, "the coordinator did not start (log %s)", log);
    long threads0 = proc_status(coord, "Threads"), rss0 = proc_status(coord, "VmRSS");
    int sessions = hostile_sessions(2000);
    for (int s = 0; s < sessions; s++) {
        xdc_wan_peer *p = s % 2 ? raw_join(&h, s % N) : raw_open(&h, s % N);
        char reply[512];
        xdc_err_t rc = s % 2
                           ? raw_text(p, "[[[[[[[[", reply, sizeof reply)
                           : raw_text(p, "{\"op\":\"set\",\"key\":\"finished\",\"value\":\"1\"}", reply, sizeof reply);
        XDC_ASSERT_MSG(s % 2 ? rc == XDC_ERR_CLOSED : rc == XDC_OK && strstr(reply, "before join"), "session %d: %s %s",
                       s, xdc_errname(rc), reply);
        xdc_wan_peer_close(p);
    }
    long threads1 = proc_status(coord, "Threads"), rss1 = proc_status(coord, "VmRSS");
    printf("xdc coordinator after %d sessions: threads %ld -> %ld, RSS %ld -> %ld kB\n", sessions, threads0, threads1,
           rss0, rss1);
    XDC_ASSERT_MSG(threads1 <= threads0 + 4, "coordinator threads grew from %ld to %ld", threads0, threads1);
    /* Every session's peer is freed (before: +89 MiB over these 2,000, about 45 KiB each). Not under
     * AddressSanitizer: its quarantine holds freed memory (LeakSanitizer checks for leaks there). */
#ifndef __SANITIZE_ADDRESS__
    XDC_ASSERT_MSG(rss1 - rss0 <= 5 * 1024, "coordinator RSS grew by %ld kB over 2000 sessions", rss1 - rss0);
#endif
    rdzv_client *c = member(&h, 2);
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(rdzv_set(c, "wan/1/0", "127.0.0.1:1", &d));
    rdzv_client_destroy(c);
    XDC_ASSERT(kill(coord, SIGTERM) == 0);
    int status = 0;
    XDC_ASSERT(waitpid(coord, &status, 0) == coord);
    XDC_ASSERT_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 75, "coordinator ended with status 0x%x", status);
    char *out = xdc_test_read_file(log, NULL);
    XDC_ASSERT_STR_CONTAINS(out, "certificate us-east/0 (not joined) sent set before joining; closing");
    XDC_ASSERT_STR_CONTAINS(out, "closing the connection of eu-west/west-node1:1: nested value");
    free(out);
    hostile_close(&h);
}


/* Log lines holding `what`. */
static int count_logged(hostile *h, const char *what)
{
    char *text = xdc_test_read_file(h->log, NULL);
    int n = 0;
    for (const char *at = text; at && (at = strstr(at, what)); at++) n++;
    free(text);
    return n;
}

/* The store engine's counters once they settle (bounded wait: the engine reaps on its own thread). */
static xdc_wan_counts settled_counts(xdc_wan_engine *eng, int peers)
{
    xdc_wan_counts c = {0};
    for (int t = 0; t < 2000; t++) {
        xdc_wan_engine_counts(eng, &c);
        if (c.peers <= peers) break;
        nanosleep(&(struct timespec){0, 5 * 1000000L}, NULL);
    }
    return c;
}

/* Sessions from one member certificate, served (joined, wrote, left), refused before join, and refused by
 * the certificate's share of connections (9 at once, 8 allowed): the store's engine frees every peer, so
 * its peer count comes back to the members still connected (before: every session ever made stayed,
 * ~45 KiB each). */
XDC_TEST_T(hostile_rdzv_store_frees_every_peer_it_served_or_refused, 60)
{
    hostile h;
    hostile_open(&h);
    rdzv_client *honest = member(&h, 2);                       /* one live member throughout */
    int sessions = hostile_sessions(2000), refused_by_cap = 0; /* XDC_HOSTILE_SESSIONS=3000: issue 31's count */
    long rss0 = proc_status(0, "VmRSS");
    for (int s = 0; s < sessions; s += 10) {
        xdc_wan_peer *p[9];
        for (int i = 0; i < 9; i++) {
            xdc_diag d = {{0}};
            XDC_ASSERT_OK(xdc_wan_connect(h.eng[1], "127.0.0.1", h.port, RDZV_SERVER_REGION, 0, &p[i], &d));
            /* Not the ninth: the store drops it once its handshake is done, without a word the client's engine
             * would take for an answer, so that engine redials it until its own deadline and a wait for it
             * to be ready lasts up to that (10 s). The store's log says when it was refused. */
            if (i < 8) XDC_ASSERT_OK(xdc_wan_peer_wait_ready(p[i], 10000, &d));
        }
        await_connections(&h, 1 + 8); /* the honest member and the certificate's share; the ninth refused */
        for (int t = 0; t < 2000 && count_logged(&h, "its certificate holds too many connections") <= s / 10; t++)
            nanosleep(&(struct timespec){0, 5 * 1000000L}, NULL);
        for (int i = 0; i < 9; i++) xdc_wan_peer_destroy(p[i]);
        await_connections(&h, 1);
        char reply[512];
        xdc_wan_peer *q = raw_join(&h, 1); /* the tenth: served */
        XDC_ASSERT_OK(raw_text(q, "{\"op\":\"set\",\"key\":\"wan/0/1\",\"value\":\"x\"}", reply, sizeof reply));
        XDC_ASSERT_STR_CONTAINS(reply, "\"ok\":true");
        xdc_wan_peer_destroy(q);
        await_connections(&h, 1);
    }
    refused_by_cap = count_logged(&h, "its certificate holds too many connections");
    xdc_wan_counts c = settled_counts(h.srv_eng, 1);
    long rss1 = proc_status(0, "VmRSS");
    printf("%d sessions from one certificate (%d refused by its share): store engine holds %d peers, %d requests; "
           "RSS %ld -> %ld kB\n",
           sessions, refused_by_cap, c.peers, c.requests, rss0, rss1);
    XDC_ASSERT_EQ(refused_by_cap, (sessions + 9) / 10); /* one of each 9 at once */
    XDC_ASSERT_MSG(c.peers == 1, "the store's engine holds %d peers for 1 live member", c.peers);
    assert_logged(&h, "certificate us-east/1", "its certificate holds too many connections");
    rdzv_client_destroy(honest);
    hostile_close(&h);
}

/* us-east's rank 0 writes rejoin bootstraps intra/us-east/<n> until the store refuses one (at most 1,000), each
 * of a bootstrap's size (XDC_INTRA_BOOTSTRAP_MAX is 320): the key count runs out, not the bytes. Returns how
 * many were accepted; the refusal is in reply[cap]. */
static int fill_rejoin_keys(xdc_wan_peer *p, char *reply, size_t cap)
{
    char msg[512];
    int written = 0;
    for (int n = 0; n < 1000; n++) {
        snprintf(msg, sizeof msg, "{\"op\":\"set\",\"key\":\"intra/us-east/%d\",\"value\":\"%0300d\"}", n, n);
        XDC_ASSERT_OK(raw_text(p, msg, reply, cap));
        if (!strstr(reply, "\"ok\":true")) break;
        written++;
    }
    return written;
}

/* A region's rank 0 writing rejoin bootstraps intra/<region>/<n> without end is refused at its quota, named
 * in the reply and in the store's log with its certificate; another member's writes still succeed (before:
 * the store filled at 4,096 keys and an innocent member's write failed with "store full"). */
XDC_TEST_T(hostile_rdzv_member_over_its_quota_is_refused_and_named, 60)
{
    hostile h;
    hostile_open(&h);
    xdc_wan_peer *p = raw_join(&h, 0);
    char reply[512];
    int written = fill_rejoin_keys(p, reply, sizeof reply);
    rdzv_quota q;
    rdzv_quota_init(&q); /* the store's: its host gave no shape */
    XDC_ASSERT_EQ(written, q.keys[RDZV_KEY_REJOIN]);
    XDC_ASSERT_STR_CONTAINS(reply, "us-east/east-node1:0 is over its quota of 64 keys");
    assert_logged(&h, "us-east/east-node1:0", "(certificate us-east/0): over its quota");
    /* Overwriting its own key stays within the quota. */
    XDC_ASSERT_OK(raw_text(p, "{\"op\":\"set\",\"key\":\"intra/us-east/3\",\"value\":\"again\"}", reply, sizeof reply));
    XDC_ASSERT_STR_CONTAINS(reply, "\"ok\":true");
    xdc_wan_peer_destroy(p);
    rdzv_client *c = member(&h, 1);
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(rdzv_set(c, "wan/0/1", "127.0.0.1:1", &d));
    XDC_ASSERT_OK(rdzv_set(c, "metrics/us-east/1", "{}", &d));
    rdzv_client_destroy(c);
    pass_barrier_together(&h);
    hostile_close(&h);
}

typedef struct {
    xdc_wan_peer *p;
    atomic_int stop, sent, ended;
    xdc_err_t rc; /* what ended it: the store closing the connection is XDC_ERR_CLOSED */
} busy_member;

/* Heartbeats back to back, each reply taken, until the store closes the connection or `stop`. */
static void *busy_main(void *arg)
{
    busy_member *b = arg;
    char reply[512];
    xdc_err_t rc = XDC_OK;
    while (!atomic_load(&b->stop) &&
           (rc = raw_text(b->p, "{\"op\":\"heartbeat\",\"status\":\"busy\"}", reply, sizeof reply)) == XDC_OK)
        atomic_fetch_add(&b->sent, 1);
    b->rc = rc;
    atomic_store(&b->ended, 1);
    return NULL;
}

/* A member sending requests back to back when the store closes: rdzv_server_destroy returns (each
 * connection thread sees the stop flag at every request, not only while idle) and the log names the
 * connections that still held the store (before: destroy waited on that thread as long as the member kept
 * sending, 39 s past the final line of a launch). */
XDC_TEST_T(hostile_rdzv_busy_member_does_not_hold_the_store_open, 30)
{
    hostile h;
    hostile_open(&h);
    busy_member b = {.p = raw_join(&h, 3)};
    pthread_t t;
    XDC_ASSERT(pthread_create(&t, NULL, busy_main, &b) == 0);
    while (atomic_load(&b.sent) < 50) nanosleep(&(struct timespec){0, 1000000L}, NULL); /* it is busy now */
    uint64_t t0 = xdc_now_ns();
    rdzv_server_destroy(h.srv);
    h.srv = NULL;
    double took = (double)(xdc_now_ns() - t0) / 1e9;
    atomic_store(&b.stop, 1);
    pthread_join(t, NULL);
    printf("store closed in %.2f s under a member that sent %d heartbeats\n", took, atomic_load(&b.sent));
    assert_logged(&h, "eu-west/west-node1:1", "still held it");
    xdc_wan_peer_destroy(b.p);
    hostile_close(&h);
}

/* ---- through a real `xdc launch` ------------------------------------------------------------------ */

/* `xdc launch` of the tiny sync run (8 steps) into TMP/<name>, output to TMP/<name>.log; with h, under run
 * id testrun with the certificates hostile_certs issues into its certs folder, which the test then holds
 * too, and h->port the store's once it listens. Returns the launcher's pid. */
static pid_t start_tiny_launch(const char *name, hostile *h)
{
    char dir[600], log[700], certs[700];
    const char *run = test_write_tiny_run(name, 8);
    snprintf(dir, sizeof dir, "%s/%s", xdc_test_tmpdir(), name);
    snprintf(log, sizeof log, "%s/%s.log", xdc_test_tmpdir(), name);
    if (h) {
        mkdir(dir, 0755);
        snprintf(certs, sizeof certs, "%s/certs", name);
        hostile_certs(h, certs); /* the run id of the test certificates is "testrun" */
    }
    pid_t pid = fork();
    XDC_ASSERT(pid >= 0);
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        execl(xdc_test_bin(), xdc_test_bin(), "launch", "-t", "examples/topology/demo-2region.yaml", "-c", run,
              "--run-dir", dir, "--run-id", "testrun", (char *)NULL);
        _exit(127);
    }
    for (int t = 0; h && t < 3000 && !h->port; t++) { /* bounded: 30 s */
        char *out = xdc_test_read_file(log, NULL);
        const char *at = out ? strstr(out, "rendezvous at 127.0.0.1:") : NULL;
        h->port = at ? atoi(at + strlen("rendezvous at 127.0.0.1:")) : 0;
        free(out);
        if (!h->port) nanosleep(&(struct timespec){0, 10 * 1000000L}, NULL);
    }
    XDC_ASSERT_MSG(!h || h->port > 0, "the launcher's store did not start (log %s)", log);
    return pid;
}

/* Wait for launcher `pid` of TMP/<name>: it must exit 0; its final params_xxh64 into hash[64], its output
 * (malloc'd) returned. */
static char *end_tiny_launch(const char *name, pid_t pid, char hash[64])
{
    char log[700];
    snprintf(log, sizeof log, "%s/%s.log", xdc_test_tmpdir(), name);
    int status = 0;
    XDC_ASSERT(waitpid(pid, &status, 0) == pid);
    char *out = xdc_test_read_file(log, NULL);
    XDC_ASSERT_MSG(out && WIFEXITED(status) && WEXITSTATUS(status) == 0, "launch %s ended with 0x%x:\n%s", name, status,
                   out ? out : "(no log)");
    const char *f = strstr(out, "params_xxh64=");
    XDC_ASSERT_MSG(f != NULL, "no final line in:\n%s", out);
    snprintf(hash, 64, "%.16s", f + strlen("params_xxh64="));
    return out;
}

/* During a real `xdc launch`, a member holding us-east rank 0's certificate writes rejoin bootstraps
 * intra/us-east/<n> until refused: the store refuses it at the quota the launcher sized from the run (a sync
 * run never rejoins: the margin's 8 keys), names it in the reply and in the launcher's log with its
 * certificate, and the run ends with the parameters of the same run without it (launched beside it). */
XDC_TEST_T(hostile_rdzv_quota_in_a_real_launch_is_named_and_changes_nothing, 120)
{
    if (access("/usr/share/games/fortunes", R_OK) != 0) xdc_test_skip("no corpus (Debian package fortunes)");
    hostile h;
    pid_t calm = start_tiny_launch("calm", NULL);
    pid_t evil = start_tiny_launch("quota", &h);
    xdc_wan_peer *p = raw_join(&h, 0);
    char reply[512];
    int written = fill_rejoin_keys(p, reply, sizeof reply);
    XDC_ASSERT_MSG(waitpid(evil, NULL, WNOHANG) == 0, "the run ended before the member had filled its quota");
    xdc_wan_peer_destroy(p);
    printf("a member of a real launch wrote %d rejoin bootstraps, then: %s\n", written, reply);
    XDC_ASSERT_EQ(written, RDZV_QUOTA_MARGIN); /* a sync run: rejoins 0 */
    XDC_ASSERT_STR_CONTAINS(reply, "us-east/east-node1:0 is over its quota of 8 keys");
    char want[64], got[64];
    free(end_tiny_launch("calm", calm, want));
    char *out = end_tiny_launch("quota", evil, got);
    XDC_ASSERT_STR_CONTAINS(out,
                            "refused us-east/east-node1:0's write of key 'intra/us-east/8' (certificate us-east/0): "
                            "over its quota of 8 keys");
    free(out);
    XDC_ASSERT_MSG(strcmp(want, got) == 0, "the run ended at params_xxh64=%s, without the member's writes at %s", got,
                   want);
    for (int i = 0; i < N; i++) xdc_wan_engine_destroy(h.eng[i]);
}

/* A member holding eu-west rank 1's certificate sends heartbeats back to back from the run's start through
 * its end: `xdc launch` still exits once its final line is out (the store closes that connection at once,
 * and says it did), within the 10 s a coordinator gives members to leave (docs/runtime.md). */
XDC_TEST_T(hostile_rdzv_busy_member_does_not_hold_a_real_launch_open, 120)
{
    if (access("/usr/share/games/fortunes", R_OK) != 0) xdc_test_skip("no corpus (Debian package fortunes)");
    hostile h;
    pid_t pid = start_tiny_launch("busy", &h);
    busy_member b = {.p = raw_join(&h, 3)};
    pthread_t t;
    XDC_ASSERT(pthread_create(&t, NULL, busy_main, &b) == 0);
    char log[700];
    snprintf(log, sizeof log, "%s/busy.log", xdc_test_tmpdir());
    int final = 0, exited = 0;
    for (int i = 0; i < 12000 && !final; i++) { /* bounded: 120 s for the run */
        char *out = xdc_test_read_file(log, NULL);
        final = out && strstr(out, "final val_loss=") != NULL;
        free(out);
        if (!final && waitpid(pid, NULL, WNOHANG) == pid) XDC_FAIL("the launch ended without a final line (%s)", log);
        if (!final) nanosleep(&(struct timespec){0, 10 * 1000000L}, NULL);
    }
    XDC_ASSERT_MSG(final, "no final line (%s)", log);
    /* The cap: a launcher still running 10 s after its final line is held by the member. */
    for (int i = 0; i < 1000 && !exited; i++) {
        exited = waitpid(pid, NULL, WNOHANG) == pid;
        if (!exited) nanosleep(&(struct timespec){0, 10 * 1000000L}, NULL);
    }
    if (!exited) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    atomic_store(&b.stop, 1);
    pthread_join(t, NULL);
    XDC_ASSERT_MSG(exited, "xdc launch still ran 10 s after its final line, held by a member sending heartbeats");
    char *out = xdc_test_read_file(log, NULL);
    printf("the member sent %d heartbeats; its connection ended with %s\n", atomic_load(&b.sent), xdc_errname(b.rc));
    XDC_ASSERT_ERR(b.rc, XDC_ERR_CLOSED); /* the store ended it, not the member */
    /* It held the store when the store closed (after the final line), and the store let it go. The workers'
     * own connections may not have ended yet: other names may be on the line. */
    int named = 0;
    for (char *line = strtok(out, "\n"); line && !named; line = strtok(NULL, "\n"))
        named = strstr(line, "connections still held it:") && strstr(line, "eu-west/west-node1:1");
    XDC_ASSERT_MSG(named, "the launcher did not name the member that held its store (%s)", log);
    free(out);
    xdc_wan_peer_destroy(b.p);
    for (int i = 0; i < N; i++) xdc_wan_engine_destroy(h.eng[i]);
}
