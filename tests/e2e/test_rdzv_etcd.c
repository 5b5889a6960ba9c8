/* test_rdzv_etcd.c — the rendezvous store on etcd (orchestrator/rdzv/orch_rdzv_etcd.c) against a real
 * etcd started in the test's folder on loopback: store operations (set, get, a one-look get, a get that
 * times out, a member that joins twice), barriers with a member killed mid-barrier whose lease expires,
 * two prefixes that do not see each other, etcd stopped while a member waits in a barrier (a TIMEOUT
 * naming etcd and the barrier), mutual TLS, and a whole `xdc launch --rdzv etcd://...` that ends with
 * the same params_xxh64 as the built-in store. Without the etcd binary (Debian etcd-server) the etcd
 * tests skip; the URL parsing and the launcher's exit 75 without etcd need none. */
#include "tests/xdc_test.h"

#include "common/xdc_time.h"
#include "orchestrator/launch/orch_chaos.h"
#include "orchestrator/rdzv/orch_rdzv.h"
#include "orchestrator/rdzv/orch_rdzv_keys.h"

#include <curl/curl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define ETCD_READY_TRIES 200 /* x 50 ms: how long etcd may take to answer /health */

typedef struct {
    pid_t pid;
    int port, peer; /* 0 before the first start; a restart keeps them */
    char url[128];  /* etcd://127.0.0.1:PORT (no prefix) */
} etcd_proc;

/* A loopback port nothing listens on right now. */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    XDC_ASSERT(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0);
    XDC_ASSERT(getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    close(fd);
    return ntohs(a.sin_port);
}

static size_t keep_body(char *data, size_t size, size_t n, void *arg)
{
    char *buf = arg;
    size_t have = strlen(buf), len = size * n, room = 255 - have;
    memcpy(buf + have, data, len < room ? len : room);
    buf[have + (len < room ? len : room)] = '\0';
    return len;
}

/* 1 when GET url answers with `want` in its body. */
static int http_says(const char *url, const char *want, const char *cacert, const char *cert, const char *key)
{
    char body[256] = "";
    CURL *c = curl_easy_init();
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, keep_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, (void *)body);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 1000L);
    if (cacert) curl_easy_setopt(c, CURLOPT_CAINFO, cacert);
    if (cert) curl_easy_setopt(c, CURLOPT_SSLCERT, cert);
    if (key) curl_easy_setopt(c, CURLOPT_SSLKEY, key);
    int ok = curl_easy_perform(c) == CURLE_OK && strstr(body, want) != NULL;
    curl_easy_cleanup(c);
    return ok;
}

/* Start etcd in TMP/etcd-<tag> on two free loopback ports (e's own again when e->port is set: a restart
 * on the same data) and wait (bounded) until /health says true.
 * `tls` (NULL: plain): {server cert, server key, CA} and client certificates required. etcd dies with
 * the test process (PR_SET_PDEATHSIG), so a failed assertion does not leave it behind. */
static void etcd_start(etcd_proc *e, const char *tag, const char *const *tls)
{
    if (system("command -v etcd >/dev/null 2>&1") != 0)
        xdc_test_skip("no etcd binary (Debian etcd-server; `make deps` installs it)");
    if (!e->port) {
        e->peer = free_port();
        e->port = free_port();
    }
    int peer = e->peer;
    char dir[512], log[600], curl_url[128], purl[128], cluster[160];
    const char *scheme = tls ? "https" : "http";
    snprintf(dir, sizeof dir, "%s/etcd-%s", xdc_test_tmpdir(), tag);
    snprintf(log, sizeof log, "%s.log", dir);
    snprintf(curl_url, sizeof curl_url, "%s://127.0.0.1:%d", scheme, e->port);
    snprintf(purl, sizeof purl, "http://127.0.0.1:%d", peer);
    snprintf(cluster, sizeof cluster, "t=%s", purl);
    snprintf(e->url, sizeof e->url, "etcd://127.0.0.1:%d", e->port);
    pid_t parent = getpid();
    e->pid = fork();
    XDC_ASSERT(e->pid >= 0);
    if (e->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(1);
        FILE *f = freopen(log, "w", stdout);
        if (f) dup2(fileno(f), 2);
        const char *argv[32] = {"etcd",   "--name",
                                "t",      "--data-dir",
                                dir,      "--listen-client-urls",
                                curl_url, "--advertise-client-urls",
                                curl_url, "--listen-peer-urls",
                                purl,     "--initial-advertise-peer-urls",
                                purl,     "--initial-cluster",
                                cluster};
        int n = 15;
        if (tls) {
            const char *more[] = {"--cert-file",       tls[0], "--key-file",        tls[1],
                                  "--trusted-ca-file", tls[2], "--client-cert-auth"};
            for (size_t i = 0; i < sizeof more / sizeof more[0]; i++) argv[n++] = more[i];
        }
        argv[n] = NULL;
        execvp("etcd", (char *const *)argv);
        _exit(127);
    }
    char health[200];
    snprintf(health, sizeof health, "%s/health", curl_url);
    for (int i = 0; i < ETCD_READY_TRIES; i++) {
        int status;
        XDC_ASSERT_MSG(waitpid(e->pid, &status, WNOHANG) == 0, "etcd exited at start; see %s", log);
        if (http_says(health, "\"health\":\"true\"", tls ? tls[2] : NULL, tls ? tls[3] : NULL, tls ? tls[4] : NULL))
            return;
        poll(NULL, 0, 50);
    }
    XDC_FAIL("etcd did not answer %s within %d tries; see %s", health, ETCD_READY_TRIES, log);
}

static void etcd_stop(etcd_proc *e, int sig)
{
    if (e->pid <= 0) return;
    kill(e->pid, sig);
    waitpid(e->pid, NULL, 0);
    e->pid = 0;
}

/* The target for prefix `prefix` of e, with a 2 s member lease. */
static rdzv_target target(const etcd_proc *e, const char *prefix)
{
    char url[256];
    rdzv_target t;
    snprintf(url, sizeof url, "%s/%s", e->url, prefix);
    XDC_ASSERT_OK(rdzv_target_parse(url, "unused", &t, NULL));
    t.lease_ttl_s = 2;
    return t;
}

static const char *const names[] = {"r/h:0", "r/h:1", "r/h:2"};

XDC_TEST(rdzv_etcd_target_parse)
{
    rdzv_target t;
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(rdzv_target_parse("etcd://10.0.0.5:2379", "run-7", &t, NULL));
    XDC_ASSERT(t.kind == RDZV_ETCD && t.port == 2379 && strcmp(t.host, "10.0.0.5") == 0);
    XDC_ASSERT_STR_CONTAINS(t.prefix, "xdc/run-7"); /* no prefix: the run id's */
    XDC_ASSERT_OK(rdzv_target_parse("etcd://h:1/team/a/", "run-7", &t, NULL));
    XDC_ASSERT(strcmp(t.prefix, "team/a") == 0 && strcmp(t.url, "etcd://h:1/team/a") == 0);
    XDC_ASSERT_OK(rdzv_target_parse("builtin", "r", &t, NULL));
    XDC_ASSERT(t.kind == RDZV_BUILTIN);
    const char *bad[] = {"etcd://h",    "etcd://h:0", "etcd://h:99999", "etcd://:5",
                         "etcd://h:5x", "http://h:5", "etcd://h:5/a b"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        XDC_ASSERT_ERR(rdzv_target_parse(bad[i], "r", &t, &d), XDC_ERR_CONFIG);
        XDC_ASSERT_STR_CONTAINS(d.msg, bad[i]);
    }
    /* Precedence: --rdzv, then XDC_RDZV, then the run file. */
    setenv("XDC_RDZV", "etcd://env:2", 1);
    XDC_ASSERT_OK(rdzv_target_resolve(NULL, "etcd://file:3", "r", &t, NULL));
    XDC_ASSERT(t.port == 2 && strcmp(t.source, "XDC_RDZV") == 0);
    XDC_ASSERT_OK(rdzv_target_resolve("etcd://flag:1", "etcd://file:3", "r", &t, NULL));
    XDC_ASSERT(t.port == 1 && strcmp(t.source, "--rdzv") == 0);
    setenv("XDC_RDZV", "nonsense", 1);
    XDC_ASSERT_ERR(rdzv_target_resolve(NULL, NULL, "r", &t, &d), XDC_ERR_CONFIG);
    XDC_ASSERT_STR_CONTAINS(d.msg, "XDC_RDZV");
    unsetenv("XDC_RDZV");
    XDC_ASSERT_OK(rdzv_target_resolve(NULL, "etcd://file:3", "r", &t, NULL));
    XDC_ASSERT(t.port == 3);
}

/* rdzv_ping (for `xdc doctor`) on the built-in store: a listening port answers, a closed one is named. */
XDC_TEST(rdzv_ping_builtin_names_a_closed_port)
{
    rdzv_target t;
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(rdzv_target_parse("builtin", "r", &t, NULL));
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    XDC_ASSERT(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(fd, 4) == 0);
    XDC_ASSERT(getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    snprintf(t.host, sizeof t.host, "127.0.0.1");
    t.port = ntohs(a.sin_port);
    XDC_ASSERT_OK(rdzv_ping(&t, 2000, &d));
    close(fd);
    XDC_ASSERT_ERR(rdzv_ping(&t, 2000, &d), XDC_ERR_UNAVAILABLE);
    char where[64];
    snprintf(where, sizeof where, "rendezvous 127.0.0.1:%d: Connection refused", t.port);
    XDC_ASSERT_STR_CONTAINS(d.msg, where);
}

XDC_TEST_SERIAL(rdzv_etcd_store_ops, 60)
{
    etcd_proc e = {0};
    etcd_start(&e, "ops", NULL);
    rdzv_target t = target(&e, "ops");
    rdzv_server *host;
    rdzv_client *a, *again;
    xdc_diag d = {{0}};
    char val[RDZV_VALUE_MAX], key[RDZV_KEY_MAX], big[RDZV_VALUE_MAX];
    XDC_ASSERT_OK(rdzv_ping(&t, 2000, &d));
    XDC_ASSERT_OK(rdzv_server_open(&t, NULL, names, 2, 5000, &host, &d));
    XDC_ASSERT_OK(rdzv_client_open(&t, NULL, "r/h:0", 5000, &a, &d));
    XDC_ASSERT_EQ(rdzv_server_missing(host, -1, val, sizeof val), 1);
    XDC_ASSERT_STR_CONTAINS(val, "r/h:1 (never joined)");
    /* set / get / one look / a wait that runs out */
    XDC_ASSERT_OK(rdzv_set(a, "wan/0/0", "127.0.0.1:5", &d));
    XDC_ASSERT_OK(rdzv_get(a, "wan/0/0", 1000, val, sizeof val, &d));
    XDC_ASSERT(strcmp(val, "127.0.0.1:5") == 0);
    XDC_ASSERT(rdzv_server_get(host, "wan/0/0", val, sizeof val) == 0 && strcmp(val, "127.0.0.1:5") == 0);
    XDC_ASSERT_ERR(rdzv_try_get(a, "nothing", val, sizeof val, &d), XDC_ERR_AGAIN);
    XDC_ASSERT_ERR(rdzv_get(a, "nothing", 200, val, sizeof val, &d), XDC_ERR_TIMEOUT);
    XDC_ASSERT_STR_CONTAINS(d.msg, "'nothing' was not set within 200 ms");
    for (size_t i = 0; i < sizeof big - 1; i++) big[i] = (char)(' ' + i % 95); /* every printable byte, 4 KiB */
    big[sizeof big - 1] = '\0';
    XDC_ASSERT_OK(rdzv_set(a, "stats/0/0", big, &d));
    XDC_ASSERT_OK(rdzv_get(a, "stats/0/0", 1000, val, sizeof val, &d));
    XDC_ASSERT(strcmp(val, big) == 0);
    XDC_ASSERT(rdzv_server_find(host, "wan/", key, sizeof key, val, sizeof val) == 0 && strcmp(key, "wan/0/0") == 0);
    /* heartbeat: the host sees the member alive with its status */
    XDC_ASSERT_OK(rdzv_heartbeat(a, "step 12", &d));
    rdzv_member_state st;
    XDC_ASSERT(rdzv_server_member(host, 0, &st) == 0 && st.joined && st.connected);
    XDC_ASSERT_STR_CONTAINS(st.detail, "step 12");
    XDC_ASSERT(rdzv_server_status(host, 0, val, sizeof val) == 0 && strcmp(val, "step 12") == 0); /* one read */
    XDC_ASSERT_EQ(rdzv_server_status(host, 1, val, sizeof val), -1);                              /* never joined */
    XDC_ASSERT_EQ(rdzv_server_status(host, 2, val, sizeof val), -1);                              /* no such member */
    /* compare-and-set join: a second process cannot join as a member that is alive ... */
    XDC_ASSERT_ERR(rdzv_client_open(&t, NULL, "r/h:0", 300, &again, &d), XDC_ERR_UNAVAILABLE);
    XDC_ASSERT_STR_CONTAINS(d.msg, "holds member r/h:0 alive");
    /* ... and can once it left (a clean leave revokes the lease at once) */
    rdzv_client_destroy(a);
    XDC_ASSERT(rdzv_server_member(host, 0, &st) == 0 && st.joined && !st.connected);
    XDC_ASSERT_EQ(rdzv_server_connections(host), 0);
    XDC_ASSERT_OK(rdzv_client_open(&t, NULL, "r/h:0", 2000, &again, &d));
    XDC_ASSERT_EQ(rdzv_server_connections(host), 1);
    /* A later generation of the member (a restart: XDC_RDZV_GENERATION, the same certificate, none here) takes
     * the name over while the earlier one's lease still holds it: within 2 s, not its 10 s TTL; the same
     * generation again cannot. */
    rdzv_client *later, *twin;
    setenv("XDC_RDZV_GENERATION", "1", 1);
    XDC_ASSERT_OK(rdzv_client_open(&t, NULL, "r/h:0", 2000, &later, &d));
    XDC_ASSERT(rdzv_server_member(host, 0, &st) == 0 && st.connected);
    XDC_ASSERT_ERR(rdzv_client_open(&t, NULL, "r/h:0", 300, &twin, &d), XDC_ERR_UNAVAILABLE);
    XDC_ASSERT_STR_CONTAINS(d.msg, "holds member r/h:0 alive");
    unsetenv("XDC_RDZV_GENERATION");
    rdzv_client_destroy(later);
    rdzv_client_destroy(again);
    rdzv_server_destroy(host);
    etcd_stop(&e, SIGTERM);
}

/* With etcd no store host sees a member's writes: its own client holds it to the quota the run's shape gives
 * (rdzv_client_quota), refusing a write over it with the built-in store's error naming the member; the key is
 * not written, overwrites of its own keys stay within it, and another member writes on. */
XDC_TEST(rdzv_etcd_member_quota_is_checked_on_its_own_side)
{
    etcd_proc e = {0};
    etcd_start(&e, "quota", NULL);
    rdzv_target t = target(&e, "quota");
    rdzv_server *host;
    rdzv_client *a, *b;
    xdc_diag d = {{0}};
    char key[RDZV_KEY_MAX], val[64];
    XDC_ASSERT_OK(rdzv_server_open(&t, NULL, names, 2, 5000, &host, &d));
    XDC_ASSERT_OK(rdzv_client_open(&t, NULL, "r/h:0", 5000, &a, &d));
    XDC_ASSERT_OK(rdzv_client_open(&t, NULL, "r/h:1", 5000, &b, &d));
    rdzv_quota q;
    rdzv_quota_for_run(&q, &(rdzv_run_shape){.rejoins = 2, .replans = 3});
    rdzv_client_quota(a, &q);
    int n = 0;
    xdc_err_t rc = XDC_OK;
    for (; n < 100 && rc == XDC_OK; n++) {
        snprintf(key, sizeof key, "intra/r/%d", n);
        rc = rdzv_set(a, key, "bootstrap", &d);
    }
    XDC_ASSERT_ERR(rc, XDC_ERR_AUTH);
    XDC_ASSERT_EQ(n - 1, 2 + RDZV_QUOTA_MARGIN);
    XDC_ASSERT_STR_CONTAINS(d.msg, "key 'intra/r/10': r/h:0 is over its quota of 10 keys");
    XDC_ASSERT(rdzv_server_get(host, "intra/r/10", val, sizeof val) == -1);
    XDC_ASSERT(rdzv_server_get(host, "intra/r/9", val, sizeof val) == 0);
    XDC_ASSERT_OK(rdzv_set(a, "intra/r/3", "again", &d)); /* its own key again: no new key */
    for (n = 0, rc = XDC_OK; n < 100 && rc == XDC_OK; n++) {
        snprintf(key, sizeof key, "replan/%d", n * 50);
        rc = rdzv_set(a, key, "-", &d);
    }
    XDC_ASSERT_EQ(n - 1, 3 + RDZV_QUOTA_MARGIN);
    XDC_ASSERT_STR_CONTAINS(d.msg, "r/h:0 is over its quota of 11 keys: keys under the prefixes granted to it");
    /* Any other key is one of its own: a member has 10 at most. */
    for (n = 0, rc = XDC_OK; n < 100 && rc == XDC_OK; n++) {
        snprintf(key, sizeof key, "stats/0/%d", n);
        rc = rdzv_set(a, key, "1", &d);
    }
    XDC_ASSERT_EQ(n - 1, RDZV_QUOTA_OWN_KEYS);
    XDC_ASSERT_STR_CONTAINS(d.msg, "r/h:0 is over its quota of 10 keys: its own keys");
    /* The other member's writes are its own business. */
    XDC_ASSERT_OK(rdzv_set(b, "wan/0/1", "127.0.0.1:7", &d));
    XDC_ASSERT_OK(rdzv_set(b, "intra/r/1", "x", &d));
    rdzv_client_destroy(a);
    rdzv_client_destroy(b);
    rdzv_server_destroy(host);
    etcd_stop(&e, SIGTERM);
}

typedef struct {
    rdzv_target t;
    const char *name, *barrier;
    int count;
    int64_t timeout_ms;
    xdc_err_t rc;
    xdc_diag d;
} member_ctx;

static void *member_main(void *arg)
{
    member_ctx *m = arg;
    rdzv_client *c = NULL;
    m->rc = rdzv_client_open(&m->t, NULL, m->name, 5000, &c, &m->d);
    if (m->rc == XDC_OK) m->rc = rdzv_barrier(c, m->barrier, m->count, m->timeout_ms, &m->d);
    rdzv_client_destroy(c);
    return NULL;
}

/* Bounded wait until `key_prefix` has a key in the store (the host's view); 1 when it has. */
static int wait_key(rdzv_server *host, const char *key_prefix)
{
    char k[RDZV_KEY_MAX], v[64];
    for (int i = 0; i < 400; i++) {
        if (rdzv_server_find(host, key_prefix, k, sizeof k, v, sizeof v) == 0) return 1;
        poll(NULL, 0, 25);
    }
    return 0;
}

XDC_TEST_SERIAL(rdzv_etcd_barrier_dead_member_expires, 90)
{
    etcd_proc e = {0};
    etcd_start(&e, "barrier", NULL);
    rdzv_target t = target(&e, "b");
    rdzv_server *host;
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(rdzv_server_open(&t, NULL, names, 3, 5000, &host, &d));
    /* Three live members pass a barrier, twice (generations). */
    for (int round = 0; round < 2; round++) {
        member_ctx m[3];
        pthread_t th[3];
        for (int i = 0; i < 3; i++) {
            m[i] = (member_ctx){.t = t, .name = names[i], .barrier = "live", .count = 3, .timeout_ms = 20000};
            XDC_ASSERT(pthread_create(&th[i], NULL, member_main, &m[i]) == 0);
        }
        for (int i = 0; i < 3; i++) {
            pthread_join(th[i], NULL);
            XDC_ASSERT_MSG(m[i].rc == XDC_OK, "round %d member %d: %s", round, i, m[i].d.msg);
        }
    }
    /* Member 2 arrives at barrier "b" in its own process and is killed there. */
    pid_t dead = fork();
    XDC_ASSERT(dead >= 0);
    if (dead == 0) {
        member_ctx m = {.t = t, .name = names[2], .barrier = "b", .count = 3, .timeout_ms = 60000};
        member_main(&m);
        _exit(0);
    }
    XDC_ASSERT_MSG(wait_key(host, "_rdzv/barrier/b/0/m/"), "member 2's arrival never showed");
    kill(dead, SIGKILL);
    waitpid(dead, NULL, 0);
    /* Its lease (2 s) runs out: the host sees it gone, with its arrival. */
    rdzv_member_state st = {0};
    for (int i = 0; i < 300 && rdzv_server_member(host, 2, &st) == 0 && st.connected; i++) poll(NULL, 0, 50);
    XDC_ASSERT_MSG(!st.connected && st.joined, "member 2 still alive after its lease: %s", st.detail);
    char missing[1024];
    XDC_ASSERT_EQ(rdzv_server_missing(host, -1, missing, sizeof missing), 3); /* 0 and 1 left cleanly */
    XDC_ASSERT_STR_CONTAINS(missing, "r/h:2 (its lease expired");
    /* The two live members do not pass a 3-member barrier on the dead one's arrival. */
    member_ctx m[2];
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        m[i] = (member_ctx){.t = t, .name = names[i], .barrier = "b", .count = 3, .timeout_ms = 1500};
        XDC_ASSERT(pthread_create(&th[i], NULL, member_main, &m[i]) == 0);
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        XDC_ASSERT_MSG(m[i].rc == XDC_ERR_UNAVAILABLE, "member %d: %s: %s", i, xdc_strerror(m[i].rc), m[i].d.msg);
        XDC_ASSERT_STR_CONTAINS(m[i].d.msg, "of 3 members arrived");
        XDC_ASSERT_MSG(strstr(m[i].d.msg, "r/h:2") == NULL, "the dead member counted: %s", m[i].d.msg);
    }
    rdzv_server_destroy(host);
    etcd_stop(&e, SIGTERM);
}

/* A member process (its own, forked) that joins as `name` with generation `gen`, heartbeats once and waits to be
 * killed, its log into `log`. */
static pid_t member_process(const rdzv_target *t, const char *name, const char *gen, const char *log)
{
    pid_t p = fork();
    XDC_ASSERT(p >= 0);
    if (p == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        FILE *f = freopen(log, "w", stderr);
        if (f) setvbuf(f, NULL, _IONBF, 0);
        if (gen) setenv("XDC_RDZV_GENERATION", gen, 1);
        rdzv_client *c;
        xdc_diag d = {{0}};
        if (rdzv_client_open(t, NULL, name, 5000, &c, &d) != XDC_OK || rdzv_heartbeat(c, "step 5", &d) != XDC_OK)
            _exit(1);
        for (;;) pause();
    }
    return p;
}

/* Member i as the host sees it, polled (50 ms, at most `tries`) until connected is `want`; the last state. */
static rdzv_member_state member_until(rdzv_server *host, int i, int want, int tries)
{
    rdzv_member_state st = {0};
    for (int k = 0; k < tries && rdzv_server_member(host, i, &st) == 0 && st.connected != want; k++) poll(NULL, 0, 50);
    return st;
}

/* A member stopped (SIGSTOP) past its lease's TTL (2 s) and continued: its lease ran out while it was stopped, and it
 * holds its name again under a new one at once (its keep-alive thread, first to run, renews it), so the host sees it
 * alive again; before, it ran on with its liveness gone for good and a decider dropped it at its next exchange. One
 * whose name a later generation took while it was stopped does not take it back. */
XDC_TEST_SERIAL(rdzv_etcd_member_stopped_past_its_lease_renews_it, 90)
{
    etcd_proc e = {0};
    etcd_start(&e, "renew", NULL);
    rdzv_target t = target(&e, "renew");
    rdzv_server *host;
    xdc_diag d = {{0}};
    char log[600], log2[600];
    snprintf(log, sizeof log, "%s/renew-member.log", xdc_test_tmpdir());
    snprintf(log2, sizeof log2, "%s/renew-member2.log", xdc_test_tmpdir());
    XDC_ASSERT_OK(rdzv_server_open(&t, NULL, names, 3, 5000, &host, &d));
    pid_t m = member_process(&t, names[2], NULL, log);
    XDC_ASSERT_MSG(member_until(host, 2, 1, 200).connected, "member 2 never joined");
    kill(m, SIGSTOP);
    rdzv_member_state st = member_until(host, 2, 0, 300);
    XDC_ASSERT_MSG(!st.connected && st.joined, "member 2's lease never ran out while it was stopped: %s", st.detail);
    kill(m, SIGCONT);
    st = member_until(host, 2, 1, 200);
    XDC_ASSERT_MSG(st.connected, "member 2 did not hold its name again after it was continued: %s", st.detail);
    char *text = xdc_test_read_file(log, NULL);
    XDC_ASSERT_STR_CONTAINS(text, "r/h:2's lease ");
    XDC_ASSERT_STR_CONTAINS(text, " ran out while it was stopped or cut off; it holds its name again under lease ");
    free(text);
    /* Stopped again past its lease; meanwhile a restarted process of the member (generation 1) takes the name. */
    kill(m, SIGSTOP);
    XDC_ASSERT_MSG(!member_until(host, 2, 0, 300).connected, "member 2's lease never ran out the second time");
    pid_t later = member_process(&t, names[2], "1", log2);
    XDC_ASSERT_MSG(member_until(host, 2, 1, 200).connected, "the later process never joined");
    kill(m, SIGCONT);
    int said = 0;
    for (int k = 0; k < 200 && !said; k++, poll(NULL, 0, 50)) {
        text = xdc_test_read_file(log, NULL);
        said = text && strstr(text, "ran out and was not renewed: another process holds member r/h:2 alive now");
        free(text);
    }
    XDC_ASSERT_MSG(said, "the continued process did not say it left the name to the later one");
    XDC_ASSERT(rdzv_server_status(host, 2, d.msg, sizeof d.msg) == 0 && strcmp(d.msg, "step 5") == 0);
    kill(m, SIGKILL);
    kill(later, SIGKILL);
    waitpid(m, NULL, 0);
    waitpid(later, NULL, 0);
    rdzv_server_destroy(host);
    etcd_stop(&e, SIGTERM);
}

XDC_TEST_SERIAL(rdzv_etcd_prefixes_do_not_see_each_other, 60)
{
    etcd_proc e = {0};
    etcd_start(&e, "prefix", NULL);
    rdzv_target ta = target(&e, "team/a"), tb = target(&e, "team/ab");
    rdzv_server *ha, *hb;
    rdzv_client *a, *b;
    xdc_diag d = {{0}};
    char val[64];
    XDC_ASSERT_OK(rdzv_server_open(&ta, NULL, names, 1, 5000, &ha, &d));
    XDC_ASSERT_OK(rdzv_server_open(&tb, NULL, names, 1, 5000, &hb, &d));
    /* The same member name and key in both runs. */
    XDC_ASSERT_OK(rdzv_client_open(&ta, NULL, names[0], 5000, &a, &d));
    XDC_ASSERT_OK(rdzv_client_open(&tb, NULL, names[0], 5000, &b, &d));
    XDC_ASSERT_OK(rdzv_set(a, "finished", "a", &d));
    XDC_ASSERT_ERR(rdzv_try_get(b, "finished", val, sizeof val, &d), XDC_ERR_AGAIN);
    XDC_ASSERT_OK(rdzv_set(b, "finished", "b", &d));
    XDC_ASSERT(rdzv_server_get(ha, "finished", val, sizeof val) == 0 && strcmp(val, "a") == 0);
    XDC_ASSERT(rdzv_server_get(hb, "finished", val, sizeof val) == 0 && strcmp(val, "b") == 0);
    XDC_ASSERT_OK(rdzv_barrier(a, "one", 1, 5000, &d));
    /* A new run under prefix a empties a, and only a. */
    rdzv_server_destroy(ha);
    XDC_ASSERT_OK(rdzv_server_open(&ta, NULL, names, 1, 5000, &ha, &d));
    XDC_ASSERT(rdzv_server_get(ha, "finished", val, sizeof val) != 0);
    XDC_ASSERT_OK(rdzv_try_get(b, "finished", val, sizeof val, &d));
    XDC_ASSERT(strcmp(val, "b") == 0);
    rdzv_client_destroy(a);
    rdzv_client_destroy(b);
    rdzv_server_destroy(ha);
    rdzv_server_destroy(hb);
    etcd_stop(&e, SIGTERM);
}

XDC_TEST_SERIAL(rdzv_etcd_stopped_mid_barrier_is_a_named_timeout, 60)
{
    etcd_proc e = {0};
    etcd_start(&e, "stop", NULL);
    rdzv_target t = target(&e, "s");
    rdzv_server *host;
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(rdzv_server_open(&t, NULL, names, 2, 5000, &host, &d));
    member_ctx m = {.t = t, .name = names[0], .barrier = "start", .count = 2, .timeout_ms = 2000};
    pthread_t th;
    uint64_t t0 = xdc_now_ns();
    XDC_ASSERT(pthread_create(&th, NULL, member_main, &m) == 0);
    XDC_ASSERT_MSG(wait_key(host, "_rdzv/barrier/start/0/m/"), "the arrival never showed");
    etcd_stop(&e, SIGKILL);
    pthread_join(th, NULL);
    double waited = (double)(xdc_now_ns() - t0) / 1e9;
    XDC_ASSERT_MSG(m.rc == XDC_ERR_TIMEOUT, "%s: %s", xdc_strerror(m.rc), m.d.msg);
    char where[64];
    snprintf(where, sizeof where, "etcd at 127.0.0.1:%d", t.port);
    XDC_ASSERT_STR_CONTAINS(m.d.msg, where);
    XDC_ASSERT_STR_CONTAINS(m.d.msg, "barrier 'start'");
    /* Within the barrier's deadline plus one HTTP attempt's bound (3 s): no hang past it. */
    XDC_ASSERT_MSG(waited < 2.0 + 3.0 + 2.0, "the barrier returned after %.1f s", waited);
    /* `xdc doctor`'s check says the same. */
    XDC_ASSERT_ERR(rdzv_ping(&t, 300, &d), XDC_ERR_TIMEOUT);
    XDC_ASSERT_STR_CONTAINS(d.msg, where);
    rdzv_server_destroy(host);
}

typedef struct {
    rdzv_client *c;
    xdc_err_t rc;
    char val[64];
    xdc_diag d;
} getter_ctx;

static void *getter_main(void *arg)
{
    getter_ctx *g = arg;
    g->rc = rdzv_get(g->c, "later", 20000, g->val, sizeof g->val, &g->d);
    return NULL;
}

XDC_TEST_SERIAL(rdzv_etcd_restart_within_the_deadline_costs_nothing, 60)
{
    etcd_proc e = {0};
    etcd_start(&e, "restart", NULL);
    rdzv_target t = target(&e, "r");
    t.lease_ttl_s = 10; /* longer than the outage */
    rdzv_server *host;
    xdc_diag d = {{0}};
    getter_ctx g = {0};
    XDC_ASSERT_OK(rdzv_server_open(&t, NULL, names, 2, 5000, &host, &d));
    XDC_ASSERT_OK(rdzv_client_open(&t, NULL, names[0], 5000, &g.c, &d));
    pthread_t th;
    XDC_ASSERT(pthread_create(&th, NULL, getter_main, &g) == 0);
    /* etcd goes away while the member waits for a key, and comes back on the same data and ports. */
    etcd_stop(&e, SIGKILL);
    etcd_start(&e, "restart", NULL);
    rdzv_server_set(host, "later", "after the restart");
    pthread_join(th, NULL);
    XDC_ASSERT_MSG(g.rc == XDC_OK, "%s: %s", xdc_strerror(g.rc), g.d.msg);
    XDC_ASSERT(strcmp(g.val, "after the restart") == 0);
    /* The member's lease survived: it is still alive, and its next request works. */
    rdzv_member_state st;
    XDC_ASSERT(rdzv_server_member(host, 0, &st) == 0 && st.connected);
    XDC_ASSERT_OK(rdzv_heartbeat(g.c, "step 1", &d));
    rdzv_client_destroy(g.c);
    rdzv_server_destroy(host);
    etcd_stop(&e, SIGTERM);
}

/* Make a CA, a server certificate for 127.0.0.1 and a client certificate with openssl in dir. */
static void make_tls(const char *dir)
{
    char cmd[4096], out[4096];
    snprintf(cmd, sizeof cmd,
             "cd %s && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=ca "
             "-keyout ca.key -out ca.pem 2>&1 && "
             "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=etcd -keyout srv.key "
             "-out srv.csr 2>&1 && printf 'subjectAltName=IP:127.0.0.1\\nextendedKeyUsage=serverAuth,clientAuth\\n' > "
             "ext && openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile ext "
             "-out srv.pem 2>&1 && "
             "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=member -keyout cli.key "
             "-out cli.csr 2>&1 && printf 'extendedKeyUsage=clientAuth\\n' > ext2 && "
             "openssl x509 -req -in cli.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile ext2 "
             "-out cli.pem 2>&1",
             dir);
    XDC_ASSERT_MSG(xdc_test_run(cmd, out, sizeof out) == 0, "openssl: %s", out);
}

XDC_TEST_SERIAL(rdzv_etcd_mutual_tls, 60)
{
    char dir[512], f[6][600];
    snprintf(dir, sizeof dir, "%s", xdc_test_tmpdir());
    const char *files[] = {"srv.pem", "srv.key", "ca.pem", "cli.pem", "cli.key", "nothing.pem"};
    for (int i = 0; i < 6; i++) snprintf(f[i], sizeof f[i], "%s/%s", dir, files[i]);
    if (system("command -v etcd >/dev/null 2>&1") != 0)
        xdc_test_skip("no etcd binary (Debian etcd-server; `make deps` installs it)");
    make_tls(dir);
    const char *tls[] = {f[0], f[1], f[2], f[3], f[4]};
    etcd_proc e = {0};
    etcd_start(&e, "tls", tls);
    rdzv_target t = target(&e, "tls");
    rdzv_client *c = NULL;
    xdc_diag d = {{0}};
    char val[32];
    /* Plain HTTP to a TLS etcd, and TLS without a client certificate: refused at once, not retried. */
    XDC_ASSERT(rdzv_client_open(&t, NULL, names[0], 2000, &c, &d) != XDC_OK);
    t.cacert = f[2];
    xdc_err_t rc = rdzv_client_open(&t, NULL, names[0], 2000, &c, &d);
    XDC_ASSERT_MSG(rc == XDC_ERR_TLS, "without a client certificate: %s, expected XDC_ERR_TLS: %s", xdc_strerror(rc),
                   d.msg);
    XDC_ASSERT_STR_CONTAINS(d.msg, "etcd at 127.0.0.1");
    t.cert = f[3];
    XDC_ASSERT_ERR(rdzv_client_open(&t, NULL, names[0], 2000, &c, &d), XDC_ERR_CONFIG); /* a cert needs its key */
    t.key = f[4];
    XDC_ASSERT_OK(rdzv_ping(&t, 2000, &d));
    XDC_ASSERT_OK(rdzv_client_open(&t, NULL, names[0], 5000, &c, &d));
    XDC_ASSERT_OK(rdzv_set(c, "k", "over tls", &d));
    XDC_ASSERT_OK(rdzv_get(c, "k", 1000, val, sizeof val, &d));
    XDC_ASSERT(strcmp(val, "over tls") == 0);
    rdzv_client_destroy(c);
    etcd_stop(&e, SIGTERM);
}

/* The run file `name` in the test's folder: the tiny model on the fortunes corpus, then `rest`. */
static const char *write_run_file(const char *name, const char *rest)
{
    static char path[600];
    char cwd[400], text[1024];
    XDC_ASSERT(getcwd(cwd, sizeof cwd) != NULL);
    snprintf(path, sizeof path, "%s/%s", xdc_test_tmpdir(), name);
    snprintf(text, sizeof text, "model: %s/examples/models/tiny.yaml\ndata: /usr/share/games/fortunes\n%s", cwd, rest);
    xdc_test_write_file(path, text);
    return path;
}

/* A sync run, 2 stages, 3 steps. */
static const char *write_run(const char *extra)
{
    char rest[512];
    snprintf(rest, sizeof rest,
             "mode: sync\npipeline_stages: 2\nmicrobatches: 2\nsteps: 3\ncodec: none\nbucket_mb: 0.05\nthreads: 1\n%s",
             extra);
    return write_run_file("run.yaml", rest);
}

static void final_hash(const char *out, char *hash, size_t cap)
{
    const char *h = strstr(out, "params_xxh64=");
    XDC_ASSERT_MSG(h != NULL, "no params_xxh64 in:\n%s", out);
    h += strlen("params_xxh64=");
    snprintf(hash, cap, "%.*s", (int)strcspn(h, " \n"), h);
}

XDC_TEST_SERIAL(rdzv_etcd_launch_matches_builtin, 240)
{
    if (access("/usr/share/games/fortunes", R_OK) != 0) xdc_test_skip("no corpus (Debian fortunes; `make deps`)");
    etcd_proc e = {0};
    etcd_start(&e, "launch", NULL);
    const char *run = write_run("timeouts: {rendezvous: 30s, operation: 30s}\n");
    static char out[65536];
    char cmd[2048], want[64], got[64];
    snprintf(cmd, sizeof cmd, "timeout 200 %s launch -t examples/topology/demo-2region.yaml -c %s --run-dir %s/builtin",
             xdc_test_bin(), run, xdc_test_tmpdir());
    int rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "built-in launch exited %d:\n%s", rc, out);
    final_hash(out, want, sizeof want);
    snprintf(cmd, sizeof cmd,
             "timeout 200 %s launch -t examples/topology/demo-2region.yaml -c %s --run-dir %s/etcd --rdzv %s/launch",
             xdc_test_bin(), run, xdc_test_tmpdir(), e.url);
    rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "etcd launch exited %d:\n%s", rc, out);
    XDC_ASSERT_STR_CONTAINS(out, "rendezvous at etcd://127.0.0.1:");
    final_hash(out, got, sizeof got);
    XDC_ASSERT_MSG(strcmp(want, got) == 0, "etcd run params_xxh64=%s, built-in %s", got, want);
    etcd_stop(&e, SIGTERM);
}

XDC_TEST_SERIAL(rdzv_etcd_unreachable_launch_exits_75, 60)
{
    if (access("/usr/share/games/fortunes", R_OK) != 0) xdc_test_skip("no corpus (Debian fortunes; `make deps`)");
    const char *run = write_run("timeouts: {rendezvous: 2s, operation: 2s}\n");
    int port = free_port(); /* nothing listens there */
    char cmd[2048], out[8192], where[64];
    snprintf(cmd, sizeof cmd,
             "timeout 60 %s launch -t examples/topology/demo-2region.yaml -c %s --run-dir %s/r "
             "--rdzv etcd://127.0.0.1:%d/x",
             xdc_test_bin(), run, xdc_test_tmpdir(), port);
    int rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 75, "launch exited %d, expected 75:\n%s", rc, out);
    snprintf(where, sizeof where, "etcd at 127.0.0.1:%d did not answer", port);
    XDC_ASSERT_STR_CONTAINS(out, where);
    XDC_ASSERT_STR_CONTAINS(out, "clearing the run's prefix");
}

/* A rendezvous value that is neither builtin nor etcd:// is a configuration error (exit 78) naming its
 * source: the run file's line and column, or the flag. */
XDC_TEST(rdzv_etcd_bad_values_are_config_errors)
{
    if (access("/usr/share/games/fortunes", R_OK) != 0) xdc_test_skip("no corpus (Debian fortunes; `make deps`)");
    const char *run = write_run("rdzv: zk://a:1\n");
    char cmd[2048], out[8192], where[700];
    snprintf(cmd, sizeof cmd, "%s launch -t examples/topology/demo-2region.yaml -c %s --run-dir %s/r", xdc_test_bin(),
             run, xdc_test_tmpdir());
    int rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 78, "launch exited %d, expected 78:\n%s", rc, out);
    snprintf(where, sizeof where, "%s:10:7: error: rdzv: rendezvous 'zk://a:1'", run);
    XDC_ASSERT_STR_CONTAINS(out, where);
    run = write_run("");
    snprintf(cmd, sizeof cmd,
             "%s launch -t examples/topology/demo-2region.yaml -c %s --run-dir %s/r --rdzv etcd://nohost",
             xdc_test_bin(), run, xdc_test_tmpdir());
    rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 78, "launch exited %d, expected 78:\n%s", rc, out);
    XDC_ASSERT_STR_CONTAINS(out, "from --rdzv: rendezvous 'etcd://nohost': 'nohost' is not HOST:PORT");
}

/* The multi-host path with etcd: `xdc coordinator --rdzv etcd://...` (no --host: it hosts nothing), then
 * one agent per node as launch scripts start them, with the store from --rdzv on one and from XDC_RDZV
 * on the other and no --coordinator on either; the coordinator ends with the run's summary. */
XDC_TEST_SERIAL(rdzv_etcd_coordinator_and_agents_started_elsewhere, 180)
{
    if (access("/usr/share/games/fortunes", R_OK) != 0) xdc_test_skip("no corpus (Debian fortunes; `make deps`)");
    etcd_proc e = {0};
    etcd_start(&e, "coord", NULL);
    const char *run = write_run("timeouts: {rendezvous: 30s, operation: 30s}\n");
    char dir[600], log[700], url[200], cmd[4096], out[16384];
    snprintf(dir, sizeof dir, "%s/run", xdc_test_tmpdir());
    snprintf(log, sizeof log, "%s/coord.log", xdc_test_tmpdir());
    snprintf(url, sizeof url, "%s/teams/coord", e.url);
    pid_t p = fork();
    XDC_ASSERT(p >= 0);
    if (p == 0) {
        FILE *f = freopen(log, "w", stdout);
        (void)f;
        dup2(1, 2);
        execl(xdc_test_bin(), xdc_test_bin(), "coordinator", "-t", "examples/topology/demo-2region.yaml", "-c", run,
              "--run-dir", dir, "--run-id", "coord-etcd", "--rdzv", url, (char *)NULL);
        _exit(127);
    }
    /* Agents start once the coordinator has emptied the run's prefix (it says so by printing how to start
     * them): an agent that joined before would lose its keys to that. */
    int ready = 0;
    for (int i = 0; i < 400 && !ready; i++) {
        char *text = xdc_test_read_file(log, NULL);
        ready = text && strstr(text, "start one agent per node") != NULL;
        free(text);
        if (!ready) poll(NULL, 0, 25);
    }
    XDC_ASSERT_MSG(ready, "the coordinator did not start");
    snprintf(cmd, sizeof cmd,
             "export XDC_ADVERTISE_HOST=127.0.0.1; "
             "timeout 120 %1$s agent -t examples/topology/demo-2region.yaml -c %2$s --run-dir %3$s --region us-east "
             "--node 0 --run-id coord-etcd --rdzv %4$s & p=$!; "
             "XDC_RDZV=%4$s timeout 120 %1$s agent -t examples/topology/demo-2region.yaml -c %2$s --run-dir %3$s "
             "--region eu-west --node 0 --run-id coord-etcd; "
             "a=$?; wait $p; b=$?; exit $((a + b))",
             xdc_test_bin(), run, dir, url);
    int rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "agents exited %d:\n%s", rc, out);
    int status;
    XDC_ASSERT(waitpid(p, &status, 0) == p);
    char *text = xdc_test_read_file(log, NULL);
    XDC_ASSERT_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "coordinator exited with status 0x%x:\n%s", status,
                   text);
    XDC_ASSERT_STR_CONTAINS(text, "final val_loss=");
    XDC_ASSERT(strstr(text, "params_xxh64=0 ") == NULL);
    free(text);
    etcd_stop(&e, SIGTERM);
}

/* An elastic DiLoCo run file of `steps` steps (the tiny model, 4 inner steps, 2 regions at least) in the test's
 * folder. */
static const char *write_elastic_run(int steps)
{
    char rest[512];
    snprintf(rest, sizeof rest,
             "mode: diloco\ndiloco: {inner_steps: 4}\npipeline_stages: 1\nmicrobatches: 1\nsteps: %d\ncodec: none\n"
             "threads: 1\nelastic: {min_regions: 2, grace: 5s}\ntimeouts: {rendezvous: 30s, operation: 30s}\n",
             steps);
    return write_run_file("elastic.yaml", rest);
}

/* The run's output `out` (the launch's, then every worker's "final parameters of region" line) has the summary's
 * final line, and each of demo-3region's regions ends on its params_xxh64. */
static void expect_three_on_one_model(const char *out)
{
    char want[64], needle[96];
    const char *fin = strstr(out, "\nfinal ");
    XDC_ASSERT_MSG(fin != NULL, "no final line in:\n%s", out);
    final_hash(fin, want, sizeof want);
    for (int r = 0; r < 3; r++) {
        static const char *const region[3] = {"us-east", "eu-west", "ap-south"};
        snprintf(needle, sizeof needle, "final parameters of region %s: params_xxh64=%s\n", region[r], want);
        XDC_ASSERT_MSG(strstr(out, needle) != NULL, "region %s does not end on the run's %s:\n%s", region[r], want,
                       out);
    }
}

/* Rejoining with etcd as the store (docs/runtime.md, "Rejoining"): `xdc launch --rdzv etcd://... --max-restarts
 * 1` of an elastic DiLoCo run over three regions; ap-south's worker is killed after step 20 (in a round's
 * exchange or between rounds: either way the region leaves). The launcher starts its agent again
 * (XDC_RDZV_GENERATION=1), and its worker takes its member name over from the killed process (the same
 * certificate, none here, and a later generation: it revokes that lease instead of waiting out its 10 s
 * TTL), finds its earlier process's keys in etcd, asks to rejoin and is taken back at an outer round: the
 * run ends with exit 0 and every region on the run's parameters. */
XDC_TEST_SERIAL(rdzv_etcd_elastic_region_killed_restarted_and_rejoined, 240)
{
    if (access("/usr/share/games/fortunes", R_OK) != 0) xdc_test_skip("no corpus (Debian fortunes; `make deps`)");
    etcd_proc e = {0};
    etcd_start(&e, "rejoin", NULL);
    const char *run = write_elastic_run(200);
    char cmd[4096];
    static char out[65536];
    /* The launch in the background; the worker killed once step 20 is printed (bounded: 2400 x 50 ms). */
    snprintf(cmd, sizeof cmd,
             "d=%1$s/run; timeout 200 %2$s launch -t examples/topology/demo-3region.yaml -c %3$s --run-dir $d "
             "--rdzv %4$s/rejoin --max-restarts 1 >%1$s/launch.log 2>&1 & p=$!; "
             "for i in $(seq 2400); do grep -q 'step    20/' %1$s/launch.log && break; sleep 0.05; done; "
             "kill -9 $(cat $d/pids/ap-south-0.pid); wait $p; echo \"launch exited $?\"; cat %1$s/launch.log; "
             "grep -h 'final parameters of region\\|takes its name over' $d/logs/*.log",
             xdc_test_tmpdir(), xdc_test_bin(), run, e.url);
    xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(strstr(out, "launch exited 0\n") != NULL, "launch failed:\n%s", out);
    XDC_ASSERT_STR_CONTAINS(out, "starting region ap-south's agents again (restart 1 of --max-restarts 1)");
    XDC_ASSERT_STR_CONTAINS(out, "region ap-south rejoins the run at the outer round at step");
    XDC_ASSERT_STR_CONTAINS(out, " regions=us-east,eu-west,ap-south\n");
    XDC_ASSERT_STR_CONTAINS(out, "rendezvous: member ap-south/south-node1:0, generation 1, takes its name over from "
                                 "generation 0 (the same certificate)");
    expect_three_on_one_model(out);
    etcd_stop(&e, SIGTERM);
}

/* The round decider under an etcd lease (docs/runtime.md, "Who decides"; orch_decider.h): an elastic DiLoCo run
 * over two regions with two `xdc coordinator`s on one prefix, the first deciding and the second --standby, both
 * with a 2 s lease on the role, and one agent per region started elsewhere. The tests act on the first one from
 * what the store says (decider/state: "v1 <decided> <open> ..."), never on time. */
typedef struct {
    etcd_proc e;
    char url[200], dir[600], log[2][700], agents_log[700];
    pid_t coord[2], agents;
    rdzv_server *view; /* the test's own look at the run's keys (attached: nothing emptied) */
} decider_run;

static pid_t spawn_logged(const char *log, char *const *argv)
{
    pid_t p = fork();
    XDC_ASSERT(p >= 0);
    if (p == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        FILE *f = freopen(log, "w", stdout);
        (void)f;
        dup2(1, 2);
        execv(argv[0], argv);
        _exit(127);
    }
    return p;
}

/* Wait (bounded: 400 x 25 ms) until `log` says `what`. */
static void wait_log(const char *log, const char *what)
{
    int ready = 0;
    for (int i = 0; i < 400 && !ready; i++) {
        char *text = xdc_test_read_file(log, NULL);
        ready = text && strstr(text, what) != NULL;
        free(text);
        if (!ready) poll(NULL, 0, 25);
    }
    XDC_ASSERT_MSG(ready, "%s never says '%s'", log, what);
}

static void decider_start(decider_run *d, const char *tag)
{
    if (access("/usr/share/games/fortunes", R_OK) != 0) xdc_test_skip("no corpus (Debian fortunes; `make deps`)");
    memset(d, 0, sizeof *d);
    etcd_start(&d->e, tag, NULL);
    char *run = (char *)write_elastic_run(48), cmd[4096];
    snprintf(d->url, sizeof d->url, "%s/%s", d->e.url, tag);
    snprintf(d->dir, sizeof d->dir, "%s/run", xdc_test_tmpdir());
    for (int i = 0; i < 2; i++) {
        snprintf(d->log[i], sizeof d->log[i], "%s/coord-%d.log", xdc_test_tmpdir(), i);
        char *argv[] = {(char *)xdc_test_bin(),
                        "coordinator",
                        "-t",
                        "examples/topology/demo-2region.yaml",
                        "-c",
                        run,
                        "--run-dir",
                        d->dir,
                        "--run-id",
                        "decider",
                        "--rdzv",
                        d->url,
                        "--decider-ttl",
                        "2",
                        i ? "--standby" : NULL,
                        NULL};
        d->coord[i] = spawn_logged(d->log[i], argv);
        wait_log(d->log[i], i ? "standing by to decide" : "start one agent per node"); /* the prefix emptied */
    }
    rdzv_target t = target(&d->e, tag);
    t.attach = 1;
    XDC_ASSERT_OK(rdzv_server_open(&t, NULL, NULL, 0, 5000, &d->view, NULL));
    snprintf(d->agents_log, sizeof d->agents_log, "%s/agents.log", xdc_test_tmpdir());
    snprintf(cmd, sizeof cmd,
             "export XDC_ADVERTISE_HOST=127.0.0.1; for r in us-east eu-west; do timeout 150 %1$s agent -t "
             "examples/topology/demo-2region.yaml -c %2$s --run-dir %3$s --region $r --node 0 --run-id decider "
             "--rdzv %4$s & done; s=0; for p in $(jobs -p); do wait $p || s=1; done; exit $s",
             xdc_test_bin(), run, d->dir, d->url);
    char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    d->agents = spawn_logged(d->agents_log, argv);
}

/* The decider's state as the store has it: 0 with the last round decided and the open one (-1: none). */
static int decider_state(decider_run *d, long long *decided, long long *open)
{
    char val[RDZV_VALUE_MAX];
    return rdzv_server_get(d->view, RDZV_KEY_DECIDER_STATE, val, sizeof val) == 0 &&
                   sscanf(val, "v1 %lld %lld", decided, open) == 2
               ? 0
               : -1;
}

/* Every process ends 0, and the run on one model: each region's final parameters are the summary's. Returns
 * the log of the coordinator that stood by (read with xdc_test_read_file: the caller frees it). */
static char *decider_finish(decider_run *d, int expect_first)
{
    int status;
    XDC_ASSERT(waitpid(d->agents, &status, 0) == d->agents);
    char *agents = xdc_test_read_file(d->agents_log, NULL);
    XDC_ASSERT_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "agents ended 0x%x:\n%s", status, agents);
    free(agents);
    char *text[2] = {NULL, NULL}, want[64], needle[128], cmd[1024];
    static char finals[8192];
    for (int i = 0; i < 2; i++) {
        XDC_ASSERT(waitpid(d->coord[i], &status, 0) == d->coord[i]);
        text[i] = xdc_test_read_file(d->log[i], NULL);
        if (i == 0 && !expect_first) continue; /* killed */
        XDC_ASSERT_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "coordinator %d ended 0x%x:\n%s", i, status,
                       text[i]);
    }
    const char *fin = strstr(text[1], "\nfinal ");
    XDC_ASSERT_MSG(fin != NULL, "no final line in:\n%s", text[1]);
    final_hash(fin, want, sizeof want);
    snprintf(cmd, sizeof cmd, "grep -h 'final parameters of region' %s/logs/*.log", d->dir);
    xdc_test_run(cmd, finals, sizeof finals);
    for (int r = 0; r < 2; r++) {
        static const char *const region[2] = {"us-east", "eu-west"};
        snprintf(needle, sizeof needle, "final parameters of region %s: params_xxh64=%s\n", region[r], want);
        XDC_ASSERT_MSG(strstr(finals, needle) != NULL, "region %s does not end on the run's %s:\n%s", region[r], want,
                       finals);
    }
    free(text[0]);
    rdzv_server_destroy(d->view);
    etcd_stop(&d->e, SIGTERM);
    return text[1];
}

/* The deciding coordinator is killed during a round's exchange (its quorum published, its final set not: the
 * store's state says the round is open, checked again once the holder is stopped, so it cannot have moved
 * on); the standby takes the role when the lease ends, reads the open round from the store, finishes it and
 * the rest of the run, which ends on one model. */
XDC_TEST_SERIAL(rdzv_etcd_decider_killed_mid_round_is_taken_over, 150)
{
    decider_run d;
    decider_start(&d, "deckill");
    long long decided = -1, open = -1, killed = -1;
    for (int i = 0; i < 20000 && killed < 0; i++) {
        if (decider_state(&d, &decided, &open) == 0 && decided >= 8 && open >= 0) {
            kill(d.coord[0], SIGSTOP);
            long long again = -1;
            if (decider_state(&d, &decided, &again) == 0 && again == open) {
                kill(d.coord[0], SIGKILL);
                killed = open;
                break;
            }
            kill(d.coord[0], SIGCONT);
        }
        XDC_ASSERT_MSG(decided != RDZV_ROUND_END, "the run ended before a round was caught open");
        poll(NULL, 0, 2);
    }
    XDC_ASSERT_MSG(killed >= 0, "no open round seen in the store");
    char *text = decider_finish(&d, 0), want[160];
    snprintf(want, sizeof want,
             "took over deciding the run's rounds from the store: last decided %lld, the outer "
             "round at step %lld open",
             killed, killed);
    XDC_ASSERT_STR_CONTAINS(text, want);
    free(text);
}

/* The deciding coordinator is stopped (SIGSTOP) past its lease; once the store names the standby as the
 * holder it is resumed, and its next write, from a state that is no longer the run's, is refused by etcd
 * (the transaction's compare on its lease fails): it says so and stands by; the run ends on one model. */
XDC_TEST_SERIAL(rdzv_etcd_decider_stopped_past_its_lease_is_refused, 150)
{
    decider_run d;
    decider_start(&d, "decstop");
    long long decided = -1, open = -1;
    char holder[RDZV_VALUE_MAX] = "", first[RDZV_VALUE_MAX] = "";
    for (int i = 0; i < 20000 && !(decider_state(&d, &decided, &open) == 0 && decided >= 8); i++) poll(NULL, 0, 2);
    XDC_ASSERT_MSG(decided >= 8 && decided != RDZV_ROUND_END, "decided %lld", decided);
    XDC_ASSERT(rdzv_server_get(d.view, RDZV_KEY_DECIDER, first, sizeof first) == 0);
    kill(d.coord[0], SIGSTOP);
    char standby[64];
    snprintf(standby, sizeof standby, ":%d", (int)d.coord[1]);
    for (int i = 0; i < 6000; i++) { /* the holder's lease ends (2 s) and the standby takes the role */
        if (rdzv_server_get(d.view, RDZV_KEY_DECIDER, holder, sizeof holder) == 0 && strstr(holder, standby)) break;
        poll(NULL, 0, 5);
    }
    XDC_ASSERT_MSG(strstr(holder, standby) != NULL, "the role is held by '%s', not the standby (pid %d)", holder,
                   (int)d.coord[1]);
    kill(d.coord[0], SIGCONT);
    free(decider_finish(&d, 1));
    char *text = xdc_test_read_file(d.log[0], NULL), want[RDZV_VALUE_MAX + 64];
    snprintf(want, sizeof want, "refused %s's write of '", first);
    XDC_ASSERT_STR_CONTAINS(text, want);
    XDC_ASSERT_STR_CONTAINS(text, "no longer holds 'decider/holder'");
    free(text);
}

/* `xdc launch --chaos` kill-decider (orch_chaos.h) on an elastic DiLoCo run over three regions with etcd: the
 * launch decides first, a `xdc coordinator --standby` (2 s leases) is started beside it once the run trains,
 * its pid in the file XDC_CHAOS_DECIDER_PIDS names. The seed is chosen here with the schedule's own generator:
 * two faults, kill-decider first, then kill-worker, each due at a step of the run. At the first the launch lets
 * the role go as a killed holder would and the standby takes it over from the store; at the second the launch,
 * no longer deciding, reports the region's loss to the store and starts its agent again (and the relay routes
 * into its new worker, which it may never see out of the run), and the coordinator drops the region at once on
 * that report and takes it back. The run ends with every region on one model. */
XDC_TEST_SERIAL(rdzv_etcd_chaos_decider_killed_and_a_standby_takes_over, 240)
{
    if (access("/usr/share/games/fortunes", R_OK) != 0) xdc_test_skip("no corpus (Debian fortunes; `make deps`)");
    orch_chaos_shape sh = {
        .n_regions = 3, .workers = {1, 1, 1}, .steps = 200, .restarts = 1, .spare_regions = 1, .deciders = 1};
    orch_chaos_fault f[ORCH_CHAOS_MAX_FAULTS];
    orch_chaos_spec s;
    XDC_ASSERT_OK(orch_chaos_spec_parse("1:0.34:kill-decider,kill-worker", &s, NULL)); /* round(2.04 + 0.5) = 2 */
    for (s.seed = 1; s.seed < 1000; s.seed++) /* the decider first, at step 40 or later; the kill 40 steps on */
        if (orch_chaos_schedule(&s, &sh, f, ORCH_CHAOS_MAX_FAULTS) == 2 && f[0].kind == ORCH_CHAOS_KILL_DECIDER &&
            f[0].step >= 40 && f[1].step >= f[0].step + 40)
            break;
    XDC_ASSERT_EQ(orch_chaos_schedule(&s, &sh, f, ORCH_CHAOS_MAX_FAULTS), 2);
    XDC_ASSERT(f[0].kind == ORCH_CHAOS_KILL_DECIDER && f[1].kind == ORCH_CHAOS_KILL_WORKER);
    etcd_proc e = {0};
    etcd_start(&e, "chaosdec", NULL);
    const char *run = write_elastic_run(200);
    char cmd[4096];
    static char out[1 << 17];
    snprintf(cmd, sizeof cmd,
             "d=%1$s/chaosdec; u=%4$s/chaosdec; t=examples/topology/demo-3region.yaml; "
             "XDC_CHAOS_DECIDER_PIDS=%1$s/coord.pid timeout 200 %2$s launch -t $t -c %3$s --run-dir $d --run-id "
             "chaosdec --rdzv $u --decider-ttl 2 --max-restarts 1 --chaos %5$llu:0.34:kill-decider,kill-worker "
             ">%1$s/launch.log 2>&1 & p=$!; "
             "for i in $(seq 2400); do grep -q 'step    10/' %1$s/launch.log && break; sleep 0.05; done; "
             "timeout 200 %2$s coordinator -t $t -c %3$s --run-dir $d --run-id chaosdec --rdzv $u --standby "
             "--decider-ttl 2 >%1$s/coord.log 2>&1 & echo $! >%1$s/coord.pid; c=$!; "
             "wait $p; echo \"launch exited $?\"; wait $c; echo \"coordinator exited $?\"; cat %1$s/launch.log; "
             "echo '--- coordinator'; cat %1$s/coord.log; grep -h 'final parameters of region' $d/logs/*.log",
             xdc_test_tmpdir(), xdc_test_bin(), run, e.url, (unsigned long long)s.seed);
    xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(strstr(out, "launch exited 0\n") && strstr(out, "coordinator exited 0\n"), "failed:\n%s", out);
    XDC_ASSERT_STR_CONTAINS(out, "chaos: fault 1 kill-decider at step ");
    XDC_ASSERT_STR_CONTAINS(out, "(this launch) gone as if killed");
    XDC_ASSERT_STR_CONTAINS(out, "chaos: recovered 1 kill-decider at step ");
    XDC_ASSERT_STR_CONTAINS(out, "took over deciding the run's rounds from the store");
    /* The launch no longer decides: it follows the holder's state every 250 ms, which a short outage may never
     * show, so its chaos tracker learns the region's leaving and return from the keys the holder writes
     * (left/<region>, rejoin/<nonce>) and tells the recovery itself. */
    XDC_ASSERT_STR_CONTAINS(out, "chaos: fault 2 kill-worker at step ");
    XDC_ASSERT_STR_CONTAINS(out, "chaos: recovered 2 kill-worker at step ");
    XDC_ASSERT_STR_CONTAINS(out, "chaos: 2 faults injected of 2 planned, 2 recovered");
    XDC_ASSERT_STR_CONTAINS(out, "(restart 1 of --max-restarts 1)");
    const char *coord = strstr(out, "--- coordinator");
    XDC_ASSERT_MSG(coord && strstr(coord, "dropped from the run: ") && strstr(coord, "its agent "),
                   "the coordinator did not drop the region on the launch's report:\n%s", out);
    XDC_ASSERT_MSG(strstr(coord, "region ap-south rejoins the run at the outer round"),
                   "the coordinator did not take ap-south back:\n%s", coord);
    XDC_ASSERT_STR_CONTAINS(out, " regions=us-east,eu-west,ap-south\n");
    expect_three_on_one_model(out);
    etcd_stop(&e, SIGTERM);
}
