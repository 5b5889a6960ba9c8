/* orch_timeouts.c — the timeout hierarchy of a run (docs/runtime.md, "Timeouts"): defaults that scale
 * from the topology's RTTs when the run file does not set them, and the one wording of a wait that ran
 * out (who was waited for, where, since when, and which key changes the limit). */
#include "orchestrator/runcfg/orch_run_config.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#define MS_FLOOR_HANDSHAKE 15000
#define MS_FLOOR_WAIT      60000 /* rendezvous and operation */
#define MS_FLOOR_HEARTBEAT 1000
/* Round trips each timeout allows: a handshake is a TCP connect and a TLS 1.3 exchange per stream,
 * retried with backoff; a rendezvous or an operation is many exchanges in a row, on a loaded link. */
#define RTTS_HANDSHAKE     40.0
#define RTTS_WAIT          200.0

static int64_t at_least(int64_t floor_ms, double rtts, double rtt_ms)
{
    double v = rtts * rtt_ms;
    return v > (double)floor_ms ? (int64_t)(v + 0.5) : floor_ms;
}

void orch_run_config_scale_timeouts(orch_run_config *c, const xdc_topology *t)
{
    double r = 0;
    for (int i = 0; t && i < t->n_links; i++)
        if (t->links[i].rtt_ms > r) r = t->links[i].rtt_ms;
    unsigned set = c->timeouts.set;
    if (!(set & ORCH_TIMEOUT_RENDEZVOUS)) c->timeouts.rendezvous_ms = at_least(MS_FLOOR_WAIT, RTTS_WAIT, r);
    if (!(set & ORCH_TIMEOUT_OPERATION)) c->timeouts.operation_ms = at_least(MS_FLOOR_WAIT, RTTS_WAIT, r);
    if (!(set & ORCH_TIMEOUT_HANDSHAKE)) {
        c->timeouts.handshake_ms = at_least(MS_FLOOR_HANDSHAKE, RTTS_HANDSHAKE, r);
        if (c->timeouts.handshake_ms > c->timeouts.rendezvous_ms) c->timeouts.handshake_ms = c->timeouts.rendezvous_ms;
    }
    if (!(set & ORCH_TIMEOUT_HEARTBEAT))
        c->timeouts.heartbeat_ms = c->timeouts.operation_ms / 2 > MS_FLOOR_HEARTBEAT ? c->timeouts.operation_ms / 2
                                                                                     : MS_FLOOR_HEARTBEAT;
}

void orch_wait_expired(xdc_diag *diag, const char *what, const char *who, const char *where, uint64_t since_wall_ns,
                       int64_t timeout_ms, const char *key)
{
    if (!diag) return;
    char below[sizeof diag->msg];
    snprintf(below, sizeof below, "%s", diag->msg);
    time_t s = (time_t)(since_wall_ns / 1000000000ull);
    struct tm tm;
    char since[16];
    gmtime_r(&s, &tm);
    strftime(since, sizeof since, "%H:%M:%S", &tm);
    xdc_diag_set(diag,
                 "%s: no answer from %s at %s within %lld ms (waiting since %s UTC; timeouts.%s in the run file)%s%s",
                 what, who, where, (long long)timeout_ms, since, key, below[0] ? ": " : "", below);
}
