/* orch_identity.c — identity resolution for agents and workers (orch_identity.h). One table lists, per
 * field and in precedence order, every place a value may come from (a variable, a quotient of two
 * launcher variables, this host's position in a Slurm hostlist or in the topology, gethostname); the
 * first one present wins, the rest are only compared with it to report disagreements. Then the values
 * are checked against each other and the topology. The worker environment builder is the inverse. */
#include "orchestrator/launch/orch_identity.h"

#include "common/xdc_alloc.h"
#include "common/xdc_log.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

#define VAL_MAX       256    /* bytes of one value while resolving */
#define SRC_MAX       64     /* bytes of a source description, as orch_identity.source */
#define HOSTLIST_MAX  100000 /* hosts a SLURM_JOB_NODELIST may expand to */
#define INT_FIELD_MAX 999999999

typedef struct {
    const char *name, *flag;
    bool is_int;
    size_t off, cap; /* where the value lives in orch_identity; cap for strings */
} field_info;

#define STR_FIELD(n, fl, m)                                                       \
    {                                                                             \
        n, fl, false, offsetof(orch_identity, m), sizeof(((orch_identity *)0)->m) \
    }
#define INT_FIELD(n, fl, m)                        \
    {                                              \
        n, fl, true, offsetof(orch_identity, m), 0 \
    }
static const field_info fields[ORCH_ID_FIELD_COUNT] = {
    [ORCH_ID_RUN_ID] = STR_FIELD("run_id", "--run-id", run_id),
    [ORCH_ID_REGION] = STR_FIELD("region", "--region", region),
    [ORCH_ID_REGION_INDEX] = INT_FIELD("region_index", "--region-index", region_index),
    [ORCH_ID_NUM_REGIONS] = INT_FIELD("num_regions", "--num-regions", num_regions),
    [ORCH_ID_NODE] = INT_FIELD("node", "--node", node),
    [ORCH_ID_NUM_NODES] = INT_FIELD("num_nodes", "--nodes", num_nodes),
    [ORCH_ID_HOST] = STR_FIELD("host", "--host", host),
    [ORCH_ID_COORDINATOR] = STR_FIELD("coordinator", "--coordinator", coordinator),
    [ORCH_ID_RANK] = INT_FIELD("rank", NULL, rank),
    [ORCH_ID_WORLD_SIZE] = INT_FIELD("world_size", NULL, world_size),
    [ORCH_ID_LOCAL_RANK] = INT_FIELD("local_rank", NULL, local_rank),
    [ORCH_ID_LOCAL_WORLD_SIZE] = INT_FIELD("local_world_size", NULL, local_world_size),
    [ORCH_ID_GLOBAL_RANK] = INT_FIELD("global_rank", NULL, global_rank),
    [ORCH_ID_GLOBAL_WORLD_SIZE] = INT_FIELD("global_world_size", NULL, global_world_size),
    [ORCH_ID_MASTER_ADDR] = STR_FIELD("master_addr", NULL, master_addr),
    [ORCH_ID_MASTER_PORT] = INT_FIELD("master_port", NULL, master_port),
};

typedef enum {
    C_VAR,            /* the variable a */
    C_DIV,            /* a / b: a launcher's per-process rank or size over its processes per node */
    C_HOSTLIST_POS,   /* index of this host in the hostlist a */
    C_HOSTLIST_COUNT, /* hosts in the hostlist a */
    C_TOPO,           /* derived from the topology and the host/region resolved so far */
    C_HOSTNAME,       /* gethostname() */
} cand_kind;

typedef struct {
    orch_identity_field field;
    cand_kind kind;
    const char *a, *b;
} cand;

/* Per field, after its flag: XDC_*, torchrun, Open MPI, PMIx/PMI, Slurm, topology (DESIGN.md). PMI
 * publishes no per-node count, so it only supplies worker ranks. */
static const cand cands[] = {
    {ORCH_ID_RUN_ID, C_VAR, "XDC_RUN_ID", NULL},
    {ORCH_ID_RUN_ID, C_VAR, "TORCHELASTIC_RUN_ID", NULL},
    {ORCH_ID_HOST, C_VAR, "XDC_HOST", NULL},
    {ORCH_ID_HOST, C_VAR, "SLURMD_NODENAME", NULL},
    {ORCH_ID_HOST, C_HOSTNAME, NULL, NULL},
    {ORCH_ID_REGION, C_VAR, "XDC_REGION", NULL},
    {ORCH_ID_REGION, C_TOPO, NULL, NULL},
    {ORCH_ID_REGION_INDEX, C_VAR, "XDC_REGION_INDEX", NULL},
    {ORCH_ID_REGION_INDEX, C_TOPO, NULL, NULL},
    {ORCH_ID_NUM_REGIONS, C_VAR, "XDC_NUM_REGIONS", NULL},
    {ORCH_ID_NUM_REGIONS, C_TOPO, NULL, NULL},
    {ORCH_ID_NODE, C_VAR, "XDC_NODE_RANK", NULL},
    {ORCH_ID_NODE, C_VAR, "GROUP_RANK", NULL},
    {ORCH_ID_NODE, C_VAR, "NODE_RANK", NULL},
    {ORCH_ID_NODE, C_DIV, "RANK", "LOCAL_WORLD_SIZE"},
    {ORCH_ID_NODE, C_DIV, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {ORCH_ID_NODE, C_VAR, "SLURM_NODEID", NULL},
    {ORCH_ID_NODE, C_HOSTLIST_POS, "SLURM_JOB_NODELIST", NULL},
    {ORCH_ID_NODE, C_TOPO, NULL, NULL},
    {ORCH_ID_NUM_NODES, C_VAR, "XDC_NUM_NODES", NULL},
    {ORCH_ID_NUM_NODES, C_VAR, "GROUP_WORLD_SIZE", NULL},
    {ORCH_ID_NUM_NODES, C_DIV, "WORLD_SIZE", "LOCAL_WORLD_SIZE"},
    {ORCH_ID_NUM_NODES, C_DIV, "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {ORCH_ID_NUM_NODES, C_VAR, "SLURM_NNODES", NULL},
    {ORCH_ID_NUM_NODES, C_VAR, "SLURM_JOB_NUM_NODES", NULL},
    {ORCH_ID_NUM_NODES, C_HOSTLIST_COUNT, "SLURM_JOB_NODELIST", NULL},
    {ORCH_ID_NUM_NODES, C_TOPO, NULL, NULL},
    {ORCH_ID_COORDINATOR, C_VAR, "XDC_COORDINATOR", NULL},
    {ORCH_ID_RANK, C_VAR, "RANK", NULL},
    {ORCH_ID_RANK, C_VAR, "OMPI_COMM_WORLD_RANK", NULL},
    {ORCH_ID_RANK, C_VAR, "PMIX_RANK", NULL},
    {ORCH_ID_RANK, C_VAR, "PMI_RANK", NULL},
    {ORCH_ID_RANK, C_VAR, "SLURM_PROCID", NULL},
    {ORCH_ID_WORLD_SIZE, C_VAR, "WORLD_SIZE", NULL},
    {ORCH_ID_WORLD_SIZE, C_VAR, "OMPI_COMM_WORLD_SIZE", NULL},
    {ORCH_ID_WORLD_SIZE, C_VAR, "PMI_SIZE", NULL},
    {ORCH_ID_WORLD_SIZE, C_VAR, "SLURM_NTASKS", NULL},
    {ORCH_ID_LOCAL_RANK, C_VAR, "LOCAL_RANK", NULL},
    {ORCH_ID_LOCAL_RANK, C_VAR, "OMPI_COMM_WORLD_LOCAL_RANK", NULL},
    {ORCH_ID_LOCAL_RANK, C_VAR, "SLURM_LOCALID", NULL},
    {ORCH_ID_LOCAL_WORLD_SIZE, C_VAR, "LOCAL_WORLD_SIZE", NULL},
    {ORCH_ID_LOCAL_WORLD_SIZE, C_VAR, "OMPI_COMM_WORLD_LOCAL_SIZE", NULL},
    {ORCH_ID_GLOBAL_RANK, C_VAR, "XDC_GLOBAL_RANK", NULL},
    {ORCH_ID_GLOBAL_RANK, C_TOPO, NULL, NULL},
    {ORCH_ID_GLOBAL_WORLD_SIZE, C_VAR, "XDC_GLOBAL_WORLD_SIZE", NULL},
    {ORCH_ID_GLOBAL_WORLD_SIZE, C_TOPO, NULL, NULL},
    {ORCH_ID_MASTER_ADDR, C_VAR, "MASTER_ADDR", NULL},
    {ORCH_ID_MASTER_PORT, C_VAR, "MASTER_PORT", NULL},
};
#define N_CANDS (sizeof cands / sizeof cands[0])

/* Fields in dependency order: topology candidates need the host, then the region. */
static const orch_identity_field resolve_order[ORCH_ID_FIELD_COUNT] = {
    ORCH_ID_HOST,        ORCH_ID_RUN_ID,
    ORCH_ID_REGION,      ORCH_ID_REGION_INDEX,
    ORCH_ID_NUM_REGIONS, ORCH_ID_NODE,
    ORCH_ID_NUM_NODES,   ORCH_ID_COORDINATOR,
    ORCH_ID_RANK,        ORCH_ID_WORLD_SIZE,
    ORCH_ID_LOCAL_RANK,  ORCH_ID_LOCAL_WORLD_SIZE,
    ORCH_ID_GLOBAL_RANK, ORCH_ID_GLOBAL_WORLD_SIZE,
    ORCH_ID_MASTER_ADDR, ORCH_ID_MASTER_PORT,
};

typedef struct {
    const orch_identity_flags *flags;
    const char *const *envp;
    const xdc_topology *topo;
    orch_identity *id;
    char why[VAL_MAX + 128]; /* why the last candidate was invalid */
} ctx;

const char *orch_identity_field_name(orch_identity_field f)
{
    return (unsigned)f < ORCH_ID_FIELD_COUNT ? fields[f].name : "?";
}

const char *orch_identity_flag_name(orch_identity_field f)
{
    return (unsigned)f < ORCH_ID_FIELD_COUNT ? fields[f].flag : NULL;
}

static const char *env_get(const char *const *envp, const char *key)
{
    if (!envp) envp = (const char *const *)environ;
    size_t klen = strlen(key);
    for (; envp && *envp; envp++)
        if (strncmp(*envp, key, klen) == 0 && (*envp)[klen] == '=') return *envp + klen + 1;
    return NULL;
}

/* Strict non-negative decimal: no sign, no spaces, no trailing text. */
static bool parse_count(const char *s, int *out)
{
    if (!s || !*s || strlen(s) > 9) return false;
    int v = 0;
    for (const char *c = s; *c; c++) {
        if (*c < '0' || *c > '9') return false;
        v = v * 10 + (*c - '0');
    }
    *out = v;
    return true;
}

static int *int_slot(orch_identity *id, orch_identity_field f) { return (int *)((char *)id + fields[f].off); }
static char *str_slot(orch_identity *id, orch_identity_field f) { return (char *)id + fields[f].off; }
static bool known(const orch_identity *id, orch_identity_field f) { return id->source[f][0] != '\0'; }

/* Host names match exactly, or by their first label when one side is short ("gpu-3" vs "gpu-3.dc1"). */
static bool host_matches(const char *a, const char *b)
{
    if (strcmp(a, b) == 0) return true;
    size_t la = strcspn(a, "."), lb = strcspn(b, ".");
    bool one_short = a[la] == '\0' || b[lb] == '\0';
    return one_short && la == lb && strncmp(a, b, la) == 0;
}

/* Index of `host` in hosts[n] when it occurs exactly once; -1 otherwise (absent or ambiguous, as when
 * every node of an emulated run is "localhost"). */
static int unique_host_index(char *const *hosts, int n, const char *host)
{
    int at = -1;
    for (int i = 0; i < n; i++) {
        if (!host_matches(hosts[i], host)) continue;
        if (at >= 0) return -1;
        at = i;
    }
    return at;
}

/* The region holding `host`, when exactly one host in the whole topology matches. */
static int topo_region_of_host(const xdc_topology *t, const char *host)
{
    int region = -1, hits = 0;
    for (int r = 0; r < t->n_regions; r++) {
        for (int i = 0; i < t->regions[r].n_hosts; i++) {
            if (!host_matches(t->regions[r].hosts[i], host)) continue;
            region = r;
            hits++;
        }
    }
    return hits == 1 ? region : -1;
}

/* A topology-derived value for `f`: 1 with val set, 0 when the topology says nothing. */
static int eval_topo(ctx *c, orch_identity_field f, char *val, size_t cap)
{
    const xdc_topology *t = c->topo;
    const orch_identity *id = c->id;
    if (!t) return 0;
    int r = known(id, ORCH_ID_REGION) ? xdc_topology_region_index(t, id->region) : -1;
    int v = -1;
    switch (f) {
    case ORCH_ID_REGION:
        if (!known(id, ORCH_ID_HOST)) return 0;
        r = topo_region_of_host(t, id->host);
        if (r < 0) return 0;
        snprintf(val, cap, "%s", t->regions[r].name);
        return 1;
    case ORCH_ID_REGION_INDEX: v = r; break;
    case ORCH_ID_NUM_REGIONS: v = t->n_regions; break;
    case ORCH_ID_NODE:
        if (r >= 0 && known(id, ORCH_ID_HOST))
            v = unique_host_index(t->regions[r].hosts, t->regions[r].n_hosts, id->host);
        break;
    case ORCH_ID_NUM_NODES: v = r >= 0 ? t->regions[r].n_hosts : -1; break;
    /* a launcher that knows one region only (torchrun inside it): RANK is the rank within the region */
    case ORCH_ID_GLOBAL_RANK:
        v = r >= 0 && known(id, ORCH_ID_RANK) ? xdc_topology_first_worker(t, r) + id->rank : -1;
        break;
    case ORCH_ID_GLOBAL_WORLD_SIZE: v = xdc_topology_total_workers(t); break;
    default: break;
    }
    if (v < 0) return 0;
    snprintf(val, cap, "%d", v);
    return 1;
}

/* The hostlist in variable `var`, expanded; 0 when unset, -1 (with c->why) when malformed. */
static int eval_hostlist(ctx *c, const cand *k, char *val, size_t cap)
{
    const char *expr = env_get(c->envp, k->a);
    if (!expr) return 0;
    if (k->kind == C_HOSTLIST_POS && !known(c->id, ORCH_ID_HOST)) return 0;
    char **hosts = NULL;
    int n = 0;
    xdc_diag d = {{0}};
    if (xdc_hostlist_expand(expr, HOSTLIST_MAX, &hosts, &n, &d) != XDC_OK) {
        snprintf(c->why, sizeof c->why, "%s='%s': %s", k->a, expr, d.msg);
        return -1;
    }
    int v = k->kind == C_HOSTLIST_COUNT ? n : unique_host_index(hosts, n, c->id->host);
    xdc_hostlist_free(hosts, n);
    if (v < 0) return 0; /* this host is not in the list: say nothing rather than guess */
    snprintf(val, cap, "%d", v);
    return 1;
}

/* Evaluate one candidate for field `f` (k == NULL: the flag). Returns 1 with val/src set, 0 when the
 * source has nothing, -1 when it has a value that is not valid (c->why says why). Integer values come
 * back in canonical decimal so "03" and "3" compare equal. */
static int eval(ctx *c, orch_identity_field f, const cand *k, char *val, size_t cap, char *src, size_t scap)
{
    const char *raw = NULL;
    int rc = 1;
    if (!k) {
        raw = c->flags ? c->flags->value[f] : NULL;
        if (!raw) return 0;
        snprintf(src, scap, "%s", fields[f].flag);
    } else if (k->kind == C_VAR) {
        raw = env_get(c->envp, k->a);
        if (!raw) return 0;
        snprintf(src, scap, "%s", k->a);
    } else if (k->kind == C_DIV) {
        const char *a = env_get(c->envp, k->a), *b = env_get(c->envp, k->b);
        int x, y;
        if (!a || !b) return 0;
        if (!parse_count(a, &x) || !parse_count(b, &y) || y == 0) {
            snprintf(c->why, sizeof c->why, "%s='%s' / %s='%s' is not a count over a positive count", k->a, a, k->b, b);
            return -1;
        }
        if (f == ORCH_ID_NUM_NODES && x % y != 0) {
            snprintf(c->why, sizeof c->why, "%s=%d is not a multiple of %s=%d", k->a, x, k->b, y);
            return -1;
        }
        snprintf(val, cap, "%d", x / y);
        snprintf(src, scap, "%s/%s", k->a, k->b);
        return 1;
    } else if (k->kind == C_HOSTLIST_POS || k->kind == C_HOSTLIST_COUNT) {
        rc = eval_hostlist(c, k, val, cap);
        if (rc == 1) snprintf(src, scap, "%s", k->a);
        return rc;
    } else if (k->kind == C_TOPO) {
        rc = eval_topo(c, f, val, cap);
        if (rc == 1) snprintf(src, scap, "topology");
        return rc;
    } else {
        if (gethostname(val, cap) != 0 || !val[0]) return 0;
        val[cap - 1] = '\0';
        snprintf(src, scap, "gethostname()");
        return 1;
    }
    /* a flag or a variable: raw text */
    if (fields[f].is_int) {
        int v;
        if (!parse_count(raw, &v)) {
            snprintf(c->why, sizeof c->why, "%s='%s' is not a non-negative integer", src, raw);
            return -1;
        }
        snprintf(val, cap, "%d", v);
    } else if (!raw[0] || strlen(raw) >= fields[f].cap) {
        snprintf(c->why, sizeof c->why, "%s='%.64s' is %s", src, raw, raw[0] ? "too long" : "empty");
        return -1;
    } else {
        snprintf(val, cap, "%s", raw);
    }
    return rc;
}

static bool explicit_source(const char *src) { return src[0] == '-' || strncmp(src, "XDC_", 4) == 0; }

static xdc_err_t resolve_field(ctx *c, orch_identity_field f, xdc_diag *diag)
{
    char win[VAL_MAX] = "", wsrc[SRC_MAX] = "", val[VAL_MAX], src[SRC_MAX];
    bool have = false;
    for (size_t i = 0; i <= N_CANDS; i++) {
        const cand *k = i == 0 ? NULL : &cands[i - 1];
        if (k && k->field != f) continue;
        if (!k && !fields[f].flag) continue;
        /* gethostname() is only a fallback: a given host name is not a disagreement with it. */
        if (have && k && k->kind == C_HOSTNAME) continue;
        int r = eval(c, f, k, val, sizeof val, src, sizeof src);
        if (r == 0) continue;
        if (r < 0) {
            if (!have) {
                xdc_diag_set(diag, "identity: %s: %s", fields[f].name, c->why);
                return XDC_ERR_CONFIG;
            }
            XDC_DEBUG(XDC_SUB_ORCH, "identity: %s: ignoring %s", fields[f].name, c->why);
            continue;
        }
        if (!have) {
            snprintf(win, sizeof win, "%s", val);
            snprintf(wsrc, sizeof wsrc, "%s", src);
            have = true;
        } else if (strcmp(win, val) != 0) {
            if (explicit_source(wsrc))
                XDC_WARN(XDC_SUB_ORCH, "identity: %s: %s=%s overrides %s=%s", fields[f].name, wsrc, win, src, val);
            else XDC_DEBUG(XDC_SUB_ORCH, "identity: %s: %s=%s preferred to %s=%s", fields[f].name, wsrc, win, src, val);
        }
    }
    if (!have) return XDC_OK;
    if (fields[f].is_int) *int_slot(c->id, f) = atoi(win); /* canonical decimal from eval() */
    else snprintf(str_slot(c->id, f), fields[f].cap, "%s", win);
    snprintf(c->id->source[f], sizeof c->id->source[f], "%s", wsrc);
    return XDC_OK;
}

/* "--node, XDC_NODE_RANK, ..., topology": every place `f` is looked for. */
static void list_sources(orch_identity_field f, char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = '\0';
    if (fields[f].flag) len += (size_t)snprintf(buf, cap, "%s", fields[f].flag);
    for (size_t i = 0; i < N_CANDS && len < cap; i++) {
        const cand *k = &cands[i];
        if (k->field != f) continue;
        const char *sep = len ? ", " : "";
        if (k->kind == C_DIV) len += (size_t)snprintf(buf + len, cap - len, "%s%s/%s", sep, k->a, k->b);
        else if (k->kind == C_TOPO) len += (size_t)snprintf(buf + len, cap - len, "%stopology", sep);
        else if (k->kind == C_HOSTNAME) len += (size_t)snprintf(buf + len, cap - len, "%sgethostname()", sep);
        else len += (size_t)snprintf(buf + len, cap - len, "%s%s", sep, k->a);
    }
}

/* Values that must be below a count: (index field, count field). */
static const orch_identity_field bounded[][2] = {
    {ORCH_ID_NODE, ORCH_ID_NUM_NODES},
    {ORCH_ID_REGION_INDEX, ORCH_ID_NUM_REGIONS},
    {ORCH_ID_RANK, ORCH_ID_WORLD_SIZE},
    {ORCH_ID_LOCAL_RANK, ORCH_ID_LOCAL_WORLD_SIZE},
    {ORCH_ID_GLOBAL_RANK, ORCH_ID_GLOBAL_WORLD_SIZE},
};

/* A resolved integer must equal what the topology says; error naming both when not. */
static xdc_err_t check_against_topo(const orch_identity *id, orch_identity_field f, int expect, const char *what,
                                    const xdc_topology *t, xdc_diag *diag)
{
    if (!known(id, f) || *int_slot((orch_identity *)id, f) == expect) return XDC_OK;
    xdc_diag_set(diag, "identity: %s=%d (from %s) but topology %s has %d %s", fields[f].name,
                 *int_slot((orch_identity *)id, f), id->source[f], t->path, expect, what);
    return XDC_ERR_CONFIG;
}

static xdc_err_t check_consistency(const orch_identity *id, const xdc_topology *t, xdc_diag *diag)
{
    for (size_t i = 0; i < sizeof bounded / sizeof bounded[0]; i++) {
        orch_identity_field a = bounded[i][0], b = bounded[i][1];
        if (!known(id, a) || !known(id, b)) continue;
        int va = *int_slot((orch_identity *)id, a), vb = *int_slot((orch_identity *)id, b);
        if (va < vb) continue;
        xdc_diag_set(diag, "identity: %s=%d (from %s) is not below %s=%d (from %s)", fields[a].name, va, id->source[a],
                     fields[b].name, vb, id->source[b]);
        return XDC_ERR_CONFIG;
    }
    if (known(id, ORCH_ID_MASTER_PORT) && (id->master_port < 1 || id->master_port > 65535)) {
        xdc_diag_set(diag, "identity: MASTER_PORT=%d is not a port (1-65535)", id->master_port);
        return XDC_ERR_CONFIG;
    }
    if (!t || !known(id, ORCH_ID_REGION)) return XDC_OK;
    int r = xdc_topology_region_index(t, id->region);
    if (r < 0) {
        xdc_diag_set(diag, "identity: region '%s' (from %s) is not a region of topology %s", id->region,
                     id->source[ORCH_ID_REGION], t->path);
        return XDC_ERR_CONFIG;
    }
    XDC_CHECK(check_against_topo(id, ORCH_ID_REGION_INDEX, r, "as the index of that region", t, diag));
    XDC_CHECK(check_against_topo(id, ORCH_ID_NUM_REGIONS, t->n_regions, "regions", t, diag));
    XDC_CHECK(check_against_topo(id, ORCH_ID_NUM_NODES, t->regions[r].n_hosts, "nodes in that region", t, diag));
    return XDC_OK;
}

xdc_err_t orch_identity_resolve(const orch_identity_flags *flags, const char *const *envp, const xdc_topology *topo,
                                unsigned required, orch_identity *out, xdc_diag *diag)
{
    memset(out, 0, sizeof *out);
    for (int f = 0; f < ORCH_ID_FIELD_COUNT; f++)
        if (fields[f].is_int) *int_slot(out, (orch_identity_field)f) = -1;
    ctx c = {.flags = flags, .envp = envp, .topo = topo, .id = out};
    for (int i = 0; i < ORCH_ID_FIELD_COUNT; i++) XDC_CHECK(resolve_field(&c, resolve_order[i], diag));

    char missing[sizeof diag->msg] = "";
    size_t len = 0;
    for (int f = 0; f < ORCH_ID_FIELD_COUNT; f++) {
        if (!(required & ORCH_ID_BIT(f)) || known(out, (orch_identity_field)f)) continue;
        char looked[400];
        list_sources((orch_identity_field)f, looked, sizeof looked);
        if (len < sizeof missing)
            len += (size_t)snprintf(missing + len, sizeof missing - len, "%sno %s (looked at %s)", len ? "; " : "",
                                    fields[f].name, looked);
    }
    if (missing[0]) {
        xdc_diag_set(diag, "identity: %s", missing);
        return XDC_ERR_CONFIG;
    }
    return check_consistency(out, topo, diag);
}

void orch_identity_describe(const orch_identity *id, char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = '\0';
#define PUT(...)                                                                   \
    do {                                                                           \
        if (len < cap) len += (size_t)snprintf(buf + len, cap - len, __VA_ARGS__); \
    } while (0)
    if (known(id, ORCH_ID_REGION)) PUT("region=%s (%s)", id->region, id->source[ORCH_ID_REGION]);
    if (known(id, ORCH_ID_REGION_INDEX) && known(id, ORCH_ID_NUM_REGIONS))
        PUT(" region_index=%d/%d (%s, %s)", id->region_index, id->num_regions, id->source[ORCH_ID_REGION_INDEX],
            id->source[ORCH_ID_NUM_REGIONS]);
    if (known(id, ORCH_ID_NODE) && known(id, ORCH_ID_NUM_NODES))
        PUT(" node=%d/%d (%s, %s)", id->node, id->num_nodes, id->source[ORCH_ID_NODE], id->source[ORCH_ID_NUM_NODES]);
    if (known(id, ORCH_ID_HOST)) PUT(" host=%s (%s)", id->host, id->source[ORCH_ID_HOST]);
    if (known(id, ORCH_ID_RUN_ID)) PUT(" run=%s (%s)", id->run_id, id->source[ORCH_ID_RUN_ID]);
    if (known(id, ORCH_ID_COORDINATOR)) PUT(" coordinator=%s (%s)", id->coordinator, id->source[ORCH_ID_COORDINATOR]);
    if (known(id, ORCH_ID_RANK) && known(id, ORCH_ID_WORLD_SIZE))
        PUT(" rank=%d/%d (%s, %s)", id->rank, id->world_size, id->source[ORCH_ID_RANK], id->source[ORCH_ID_WORLD_SIZE]);
    if (known(id, ORCH_ID_GLOBAL_RANK) && known(id, ORCH_ID_GLOBAL_WORLD_SIZE))
        PUT(" global_rank=%d/%d", id->global_rank, id->global_world_size);
#undef PUT
}

/* ---- the environment contract ----------------------------------------------------------------- */

/* In the order orch_identity_worker_env() writes them. */
static const char *const contract_keys[] = {
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "XDC_RUN_ID",
    "XDC_REGION",
    "XDC_REGION_INDEX",
    "XDC_NUM_REGIONS",
    "XDC_GLOBAL_RANK",
    "XDC_GLOBAL_WORLD_SIZE",
    "XDC_COORDINATOR",
    "XDC_NODE_RANK",
    "XDC_NUM_NODES",
    "XDC_HOST",
};
#define N_CONTRACT (sizeof contract_keys / sizeof contract_keys[0])

static bool is_contract_entry(const char *kv)
{
    size_t klen = strcspn(kv, "=");
    for (size_t i = 0; i < N_CONTRACT; i++)
        if (strlen(contract_keys[i]) == klen && strncmp(kv, contract_keys[i], klen) == 0) return true;
    return false;
}

static char *kv_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *kv_printf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return NULL;
    char *s = xdc_malloc((size_t)n + 1);
    if (!s) return NULL;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

void orch_identity_env_free(char **envp)
{
    if (!envp) return;
    for (char **e = envp; *e; e++) xdc_free(*e);
    xdc_free(envp);
}

xdc_err_t orch_identity_worker_env(const orch_identity *id, const xdc_topology *topo, int slot, const char *master_addr,
                                   int master_port, const char *const *base_env, char ***envp_out, xdc_diag *diag)
{
    *envp_out = NULL;
    if (!known(id, ORCH_ID_REGION) || !known(id, ORCH_ID_NODE) || !known(id, ORCH_ID_RUN_ID) ||
        !known(id, ORCH_ID_COORDINATOR)) {
        xdc_diag_set(diag, "worker env: the node identity needs region, node, run_id and coordinator");
        return XDC_ERR_INVALID;
    }
    int r = xdc_topology_region_index(topo, id->region);
    if (r < 0) {
        xdc_diag_set(diag, "worker env: region '%s' is not in topology %s", id->region, topo->path);
        return XDC_ERR_CONFIG;
    }
    const xdc_region *g = &topo->regions[r];
    if (id->node >= g->n_hosts || slot < 0 || slot >= g->workers_per_node) {
        xdc_diag_set(diag, "worker env: node %d slot %d outside region %s (%d nodes x %d workers)", id->node, slot,
                     g->name, g->n_hosts, g->workers_per_node);
        return XDC_ERR_CONFIG;
    }
    if (master_port < 1 || master_port > 65535) {
        xdc_diag_set(diag, "worker env: MASTER_PORT %d is not a port (1-65535)", master_port);
        return XDC_ERR_INVALID;
    }
    int offset = xdc_topology_first_worker(topo, r);
    int rank = id->node * g->workers_per_node + slot;

    size_t n_base = 0;
    for (const char *const *e = base_env; e && *e; e++) n_base++;
    char **env = xdc_calloc(n_base + N_CONTRACT + 1, sizeof *env);
    if (!env) return XDC_ERR_NOMEM;
    size_t n = 0;
    for (const char *const *e = base_env; e && *e; e++) {
        if (is_contract_entry(*e)) continue;
        if (!(env[n++] = xdc_strdup(*e))) goto nomem;
    }
    char *vals[N_CONTRACT] = {
        kv_printf("RANK=%d", rank),
        kv_printf("WORLD_SIZE=%d", xdc_topology_region_workers(topo, r)),
        kv_printf("LOCAL_RANK=%d", slot),
        kv_printf("LOCAL_WORLD_SIZE=%d", g->workers_per_node),
        kv_printf("MASTER_ADDR=%s", master_addr ? master_addr : g->hosts[0]),
        kv_printf("MASTER_PORT=%d", master_port),
        kv_printf("XDC_RUN_ID=%s", id->run_id),
        kv_printf("XDC_REGION=%s", g->name),
        kv_printf("XDC_REGION_INDEX=%d", r),
        kv_printf("XDC_NUM_REGIONS=%d", topo->n_regions),
        kv_printf("XDC_GLOBAL_RANK=%d", offset + rank),
        kv_printf("XDC_GLOBAL_WORLD_SIZE=%d", xdc_topology_total_workers(topo)),
        kv_printf("XDC_COORDINATOR=%s", id->coordinator),
        kv_printf("XDC_NODE_RANK=%d", id->node),
        kv_printf("XDC_NUM_NODES=%d", g->n_hosts),
        kv_printf("XDC_HOST=%s", g->hosts[id->node]), /* the topology's name, as logs and traces show it */
    };
    bool oom = false;
    for (size_t i = 0; i < N_CONTRACT; i++) {
        env[n++] = vals[i]; /* NULLs are freed as no-ops below */
        oom |= vals[i] == NULL;
    }
    if (oom) {
        for (size_t i = 0; i < n; i++) xdc_free(env[i]);
        xdc_free(env);
        return XDC_ERR_NOMEM;
    }
    *envp_out = env;
    return XDC_OK;
nomem:
    orch_identity_env_free(env);
    return XDC_ERR_NOMEM;
}
