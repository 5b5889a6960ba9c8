/* test_rdzv.c — the rendezvous store on its own: members join over mutual TLS, a get waits for a later
 * set, a reusable barrier runs many generations, a member whose certificate names another region is
 * refused, and a barrier that times out names the member missing. */
#include "tests/test_wan_util.h"
#include "tests/xdc_test.h"

#include "orchestrator/control/orch_rdzv.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define MEMBERS 3
#define ROUNDS  40

typedef struct {
    xdc_wan_engine *eng;
    int port, idx;
    xdc_err_t rc;
    char why[512];
} member_ctx;

static void *member_main(void *arg)
{
    member_ctx *m = arg;
    rdzv_client *c = NULL;
    xdc_diag d = {{0}};
    char name[64], val[64], key[32];
    snprintf(name, sizeof name, "us/node:%d", m->idx);
    m->rc = rdzv_client_create(m->eng, "127.0.0.1", m->port, name, 10000, &c, &d);
    for (int round = 0; round < ROUNDS && m->rc == XDC_OK; round++) {
        /* Member 0 publishes after everyone is waiting for it; the others read it. */
        snprintf(key, sizeof key, "k%d", round);
        m->rc = rdzv_barrier(c, "round", MEMBERS, 10000, &d);
        if (m->rc != XDC_OK) break;
        if (m->idx == 0) {
            snprintf(val, sizeof val, "v%d", round);
            m->rc = rdzv_set(c, key, val, &d);
        } else {
            m->rc = rdzv_get(c, key, 10000, val, sizeof val, &d);
            if (m->rc == XDC_OK && (val[0] != 'v' || atoi(val + 1) != round)) {
                snprintf(m->why, sizeof m->why, "round %d read '%s'", round, val);
                m->rc = XDC_ERR_CORRUPT;
            }
        }
    }
    if (m->rc != XDC_OK && !m->why[0]) snprintf(m->why, sizeof m->why, "%s", d.msg);
    rdzv_client_destroy(c);
    return NULL;
}

XDC_TEST_T(rdzv_members_get_set_and_reuse_a_barrier, 120)
{
    const char *dir = "certs"; /* under the test's folder */
    wan_test_node srv_node, node[MEMBERS];
    wan_test_issue(dir, RDZV_SERVER_REGION, 0, 30, -60, &srv_node);
    for (int i = 0; i < MEMBERS; i++) wan_test_issue(dir, "us", i, 30, -60, &node[i]);
    xdc_wan_engine *srv_eng = wan_test_engine(&srv_node, 1, 10000);
    const char *expected[MEMBERS] = {"us/node:0", "us/node:1", "us/node:2"};
    rdzv_server *srv;
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(rdzv_server_create(srv_eng, "127.0.0.1", 0, expected, MEMBERS, &srv, &d));
    member_ctx m[MEMBERS];
    pthread_t th[MEMBERS];
    for (int i = 0; i < MEMBERS; i++) {
        m[i] = (member_ctx){.eng = wan_test_engine(&node[i], 1, 10000), .port = rdzv_server_port(srv), .idx = i};
        pthread_create(&th[i], NULL, member_main, &m[i]);
    }
    for (int i = 0; i < MEMBERS; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < MEMBERS; i++)
        XDC_ASSERT_MSG(m[i].rc == XDC_OK, "member %d: %s: %s", i, xdc_errname(m[i].rc), m[i].why);
    char val[64], missing[512];
    XDC_ASSERT(rdzv_server_get(srv, "k39", val, sizeof val) == 0 && strcmp(val, "v39") == 0);
    XDC_ASSERT(rdzv_server_get(srv, "nope", val, sizeof val) == -1);
    XDC_ASSERT_EQ(rdzv_server_missing(srv, -1, missing, sizeof missing), 0);

    /* A member claiming another region than its certificate's is refused; a lone barrier names who is
     * missing when it times out. */
    rdzv_client *c;
    XDC_ASSERT_ERR(rdzv_client_create(m[0].eng, "127.0.0.1", rdzv_server_port(srv), "eu/node:0", 5000, &c, &d),
                   XDC_ERR_UNAVAILABLE);
    XDC_ASSERT_STR_CONTAINS(d.msg, "does not match the certificate's region");
    XDC_ASSERT_OK(rdzv_client_create(m[1].eng, "127.0.0.1", rdzv_server_port(srv), "us/node:1", 5000, &c, &d));
    XDC_ASSERT_ERR(rdzv_barrier(c, "lonely", 2, 300, &d), XDC_ERR_UNAVAILABLE);
    XDC_ASSERT_STR_CONTAINS(d.msg, "missing: us/node:0");
    XDC_ASSERT_ERR(rdzv_try_get(c, "absent", val, sizeof val, &d), XDC_ERR_AGAIN);
    rdzv_client_destroy(c);
    rdzv_server_destroy(srv);
    for (int i = 0; i < MEMBERS; i++) xdc_wan_engine_destroy(m[i].eng);
    xdc_wan_engine_destroy(srv_eng);
}
