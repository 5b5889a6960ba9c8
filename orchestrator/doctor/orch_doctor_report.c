/* orch_doctor_report.c — the output of `xdc doctor` (orch_doctor.h): the table with every failure's
 * remedy, the same verdicts as JSON (jansson), and a copy of the topology carrying the measured links. */
#include "orchestrator/doctor/orch_doctor.h"

#include "common/xdc_alloc.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static const char *const verdict_words[] = {"pass", "FAIL", "skip"};
static const char *const verdict_json[] = {"pass", "fail", "skip"};

void orch_doctor_report_print(const orch_doctor_report *r, FILE *f)
{
    int n[3] = {0, 0, 0};
    fprintf(f, "%-10s %-36s %-7s %12s %12s %-7s %s\n", "check", "subject", "verdict", "measured", "expected", "unit",
            "detail");
    for (int i = 0; i < r->n_rows; i++) {
        const orch_doctor_row *w = &r->rows[i];
        char meas[32] = "-", exp[32] = "-";
        if (w->unit[0]) {
            snprintf(meas, sizeof meas, "%.2f", w->measured);
            if (w->expected > 0) snprintf(exp, sizeof exp, "%.2f", w->expected);
        }
        fprintf(f, "%-10s %-36s %-7s %12s %12s %-7s %s\n", w->check, w->subject, verdict_words[w->verdict], meas, exp,
                w->unit[0] ? w->unit : "-", w->detail);
        n[w->verdict]++;
    }
    if (n[ORCH_DOCTOR_FAIL]) fprintf(f, "\nwhat to do:\n");
    for (int i = 0; i < r->n_rows; i++)
        if (r->rows[i].verdict == ORCH_DOCTOR_FAIL)
            fprintf(f, "  %s %s: %s\n", r->rows[i].check, r->rows[i].subject, r->rows[i].fix);
    fprintf(f, "\n%d passed, %d failed, %d skipped: %s\n", n[0], n[1], n[2],
            n[ORCH_DOCTOR_FAIL] ? "NOT ready" : "ready");
}

xdc_err_t orch_doctor_report_json(const orch_doctor_report *r, const xdc_topology *t, char **out)
{
    *out = NULL;
    json_t *checks = json_array(), *links = json_array();
    for (int i = 0; i < r->n_rows; i++) {
        const orch_doctor_row *w = &r->rows[i];
        json_array_append_new(checks,
                              json_pack("{s:s, s:s, s:s, s:f, s:f, s:s, s:s, s:s}", "check", w->check, "subject",
                                        w->subject, "verdict", verdict_json[w->verdict], "measured", w->measured,
                                        "expected", w->expected, "unit", w->unit, "detail", w->detail, "fix", w->fix));
    }
    for (int i = 0; i < r->n_links; i++) {
        const orch_doctor_link *m = &r->links[i];
        json_array_append_new(links,
                              json_pack("{s:s, s:s, s:b, s:f, s:f, s:f, s:i}", "from",
                                        t->regions[t->links[i].from].name, "to", t->regions[t->links[i].to].name,
                                        "measured", m->measured, "rtt_ms", m->rtt_ms, "bandwidth_gbps",
                                        m->bandwidth_gbps, "clock_offset_ms", m->clock_offset_ms, "mtu", m->mtu));
    }
    json_t *root = json_pack("{s:b, s:o, s:o}", "passed", orch_doctor_report_passed(r), "checks", checks, "links",
                             links);
    if (!root) return XDC_ERR_NOMEM;
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!text) return XDC_ERR_NOMEM;
    *out = xdc_strdup(text);
    free(text);
    return *out ? XDC_OK : XDC_ERR_NOMEM;
}

xdc_err_t orch_doctor_write_topology(const orch_doctor_report *r, const xdc_topology *t, const char *path,
                                     xdc_diag *diag)
{
    if (r->n_links != t->n_links) return XDC_ERR_INVALID;
    /* A shallow copy whose links array is our own: regions (and their host lists) stay shared, read-only. */
    xdc_topology copy = *t;
    copy.links = xdc_calloc((size_t)(t->n_links ? t->n_links : 1), sizeof *copy.links);
    if (!copy.links) return XDC_ERR_NOMEM;
    int n = 0;
    for (int i = 0; i < t->n_links; i++) {
        copy.links[i] = t->links[i];
        const orch_doctor_link *m = &r->links[i];
        if (!m->measured) continue;
        n++;
        copy.links[i].rtt_ms = m->rtt_ms;
        if (m->bandwidth_gbps > 0) copy.links[i].bandwidth_gbps = m->bandwidth_gbps;
        if (m->mtu >= 576 && m->mtu <= 65535) copy.links[i].mtu = m->mtu;
    }
    char header[700];
    snprintf(header, sizeof header,
             "Written by `xdc doctor --write-topology` from %s: the %d measured link(s) carry the measured RTT,\n"
             "bandwidth and path MTU; everything else is as in that file.",
             t->path, n);
    xdc_err_t rc = xdc_topology_write(&copy, header, path, diag);
    xdc_free(copy.links);
    return rc;
}
