/* orch_failure.h — why a run failed, and which member caused it. A member that fails writes a report to
 * its rendezvous key failed/<member>: "XDC_ERR_NAME what failed: message". When a member stalls or dies,
 * most of the others fail too, waiting for it; the launcher (or coordinator) names one member as the
 * cause from the reports, the agents' notes and the store's view of each member's connection, so its
 * final line points at the stalled or dead member, not at the first one that gave up waiting. */
#ifndef ORCH_FAILURE_H
#define ORCH_FAILURE_H

#include "common/xdc_err.h"

#include <stddef.h>

/* The value of failed/<member> for a member that failed with `rc`, described by `text`. */
void orch_failure_format(xdc_err_t rc, const char *text, char *out, size_t cap);

/* 1 when a report says its member gave up on someone else: a wait ran out (XDC_ERR_TIMEOUT), a peer hung
 * up or was lost (CLOSED, PEER_LOST, UNAVAILABLE) or the member was told to stop (INTERRUPTED); 0 for a
 * fault of its own (disk, memory, configuration, protocol...). *text: the report after its error name. */
int orch_failure_waited(const char *report, const char **text);

/* What is known of one member when a run fails. */
typedef struct orch_failure_member {
    const char *name;   /* "region/host:rank" */
    const char *report; /* its failed/ value; NULL when it wrote none */
    const char *note;   /* an agent's note about it ("worker NAME (pid N) killed by signal 9"), or NULL */
    int connected;      /* its rendezvous connection is up */
    double silent_s;    /* connected: seconds its connection has carried nothing, keepalives included */
    const char *detail; /* the store's line about it ("NAME (last heard 3.2 s ago: step 20)") */
} orch_failure_member;

/* The member to blame and why (into why[cap]), in this order: the first with a fault of its own; one
 * that ended without a report and that its agent's note names (killed, crashed); the one without a
 * report whose connection has been silent longest, beyond silent_limit_s (stopped, hung); one that
 * wrote no report and lost its connection; the first that gave up waiting. *err: what the run ends
 * with — the blamed report's error, XDC_ERR_TIMEOUT for a silent member (it may come back: a temporary
 * failure), XDC_ERR_PEER_LOST for one whose connection is gone, XDC_OK for a worker its agent saw end
 * (the agent's exit status, which is the worker's, says it best). -1 when no member is known to have
 * failed (why is then "", *err XDC_OK). */
int orch_failure_blame(const orch_failure_member *m, int n, double silent_limit_s, char *why, size_t cap,
                       xdc_err_t *err);

#endif /* ORCH_FAILURE_H */
