/* orch_failure.c — failure reports and the choice of whom to blame (see orch_failure.h). */
#include "orchestrator/launch/orch_failure.h"

#include <stdio.h>
#include <string.h>

void orch_failure_format(xdc_err_t rc, const char *text, char *out, size_t cap)
{
    snprintf(out, cap, "%s %s", xdc_errname(rc), text);
}

/* The error a report starts with; XDC_ERR_INTERNAL for a name no code has. The pinned values are
 * negative and below 1000 in magnitude (common/xdc_err.h), so trying each finds every name. */
static xdc_err_t report_err(const char *report)
{
    size_t n = strcspn(report, " ");
    for (int v = -1; v >= -1000; v--) {
        const char *name = xdc_errname((xdc_err_t)v);
        if (strlen(name) == n && strncmp(report, name, n) == 0) return (xdc_err_t)v;
    }
    return XDC_ERR_INTERNAL;
}

int orch_failure_waited(const char *report, const char **text)
{
    size_t n = strcspn(report, " ");
    *text = report[n] ? report + n + 1 : report + n;
    switch (report_err(report)) {
    case XDC_ERR_TIMEOUT:
    case XDC_ERR_CLOSED:
    case XDC_ERR_PEER_LOST:
    case XDC_ERR_UNAVAILABLE:
    case XDC_ERR_INTERRUPTED: return 1;
    default: return 0;
    }
}

/* Members that gave up waiting, and the first of them: ", 3 members gave up waiting (first NAME: TEXT)". */
static void waiters(const orch_failure_member *m, int n, char *out, size_t cap)
{
    int count = 0, first = -1;
    const char *text = "";
    for (int i = 0; i < n; i++) {
        const char *t;
        if (!m[i].report || !orch_failure_waited(m[i].report, &t)) continue;
        if (first < 0) first = i, text = t;
        count++;
    }
    out[0] = '\0';
    if (first >= 0)
        snprintf(out, cap, "; %d member%s gave up waiting (first %s: %.300s)", count, count == 1 ? "" : "s",
                 m[first].name, text);
}

int orch_failure_blame(const orch_failure_member *m, int n, double silent_limit_s, char *why, size_t cap,
                       xdc_err_t *err)
{
    const char *text;
    why[0] = '\0';
    *err = XDC_OK;
    for (int i = 0; i < n; i++)
        if (m[i].report && !orch_failure_waited(m[i].report, &text)) {
            snprintf(why, cap, "%s: %s", m[i].name, text);
            *err = report_err(m[i].report);
            return i;
        }
    for (int i = 0; i < n; i++)
        if (!m[i].report && m[i].note) {
            snprintf(why, cap, "%s", m[i].note);
            return i; /* *err stays XDC_OK: its agent ends with the worker's own status */
        }
    int stalled = -1, lost = -1;
    for (int i = 0; i < n; i++) {
        if (m[i].report) continue;
        if (m[i].connected && m[i].silent_s > silent_limit_s && (stalled < 0 || m[i].silent_s > m[stalled].silent_s))
            stalled = i;
        if (!m[i].connected && lost < 0) lost = i;
    }
    char tail[512];
    waiters(m, n, tail, sizeof tail);
    if (stalled >= 0) {
        snprintf(why, cap, "%s stopped answering: its connection carried nothing for %.1f s (%s)%s", m[stalled].name,
                 m[stalled].silent_s, m[stalled].detail, tail);
        *err = XDC_ERR_TIMEOUT;
        return stalled;
    }
    if (lost >= 0 && tail[0]) {
        snprintf(why, cap, "%s ended without a report (%s)%s", m[lost].name, m[lost].detail, tail);
        *err = XDC_ERR_PEER_LOST;
        return lost;
    }
    for (int i = 0; i < n; i++)
        if (m[i].report) {
            orch_failure_waited(m[i].report, &text);
            snprintf(why, cap, "%s: %s", m[i].name, text);
            *err = report_err(m[i].report);
            return i;
        }
    return -1;
}
