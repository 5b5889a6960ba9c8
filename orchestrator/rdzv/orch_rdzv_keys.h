/* orch_rdzv_keys.h — the key schema of a run's rendezvous store: every key a process of the run writes or
 * reads is built here (one function per kind of key) and parsed here (rdzv_key_parse), so the store's
 * admission rule (orch_rdzv.c, may_write) and the processes that write the keys read one definition. The few
 * values whose syntax more than one process parses (an outer round's arrival or rejoin request, what a
 * member summed in a round's exchange) are built and parsed here too.
 *
 * Keys (region index: the region's position in the topology; rank: the worker's rank in its region):
 *   wan/<region index>/<rank>            a worker's WAN address                      the worker
 *   relay/<from>/<to>/<rank>             the emulated WAN's relay address            the host
 *   outer/<region index>/<rank>          its arrival at an outer round: <step>, "end", "join:<nonce>",
 *                                        "taking:<step>", "took:<step>" or "<step>+<n>" (n inner steps run
 *                                        since, DiLoCo's train_while_waiting; "join:<nonce>+<n>": run from its
 *                                        snapshot while it asks)
 *   xchg/<region index>/<rank>           what its round's exchange summed: "<step>:<one 0/1 per region>"
 *   links/<region index>/<rank>          its WAN links as it arrives at a round: "<step>:<one char per region>"
 *                                        (orchestrator/elastic/orch_routes.h)
 *   stats/<region index>/<rank>          its end-of-run statistics                   the worker
 *   ckpt/<region index>/<rank>           its last checkpoint's outcome               the worker
 *   warm/<region index>/<rank>           a restarted worker's snapshot: "<round> <xxh64>" or "none"   the worker
 *   metrics/<region>/<rank>              its metrics endpoint                        the worker
 *   failed/<member>                      why it failed                               the member (or the host)
 *   intra/<region>, intra/<region>/<n>   the region's intra bootstrap (n: after it left n times)   rank 0
 *   device/<region>                      the region's device, for the summary        rank 0
 *   replan/link/<region index>           the rate of the region's incoming links     rank 0
 *   replan/<step>                        a re-plan decided at a step                 granted (global rank 0)
 *   result, finished                     the run's result; the run is over           granted
 *   quorum/<step>, quorum/end            who is in an outer round ('1', '0', 'j', 't', 'c')   the host (orch_quorum.h)
 *   final/<step>, lost/<step>            a round's final set; who left during it     the host
 *   steps/<step>                         inner steps per region in the round after it the host (nobody waits)
 *   ran/<step>                           inner steps per region run while its round waited   the host
 *   routes/<step>                        the links the round goes around, and through whom   the host (orch_routes.h)
 *   left/<region index>                  how many times the region left the run      the host
 *   rejoin/<nonce>                       the round that takes a rejoining worker     the host
 *   back/<region index>/<n>              the round that took the region back after its n-th leaving   the host
 *   decider/holder, decider/state        who decides rounds (etcd: under its lease); the quorum's state
 *                                        written with each of its writes (orch_decider.h)     the host
 * and the barriers "joined", "start", "checkpoint", "done". Numbers are decimal without sign or leading
 * zero; names have no '/'. */
#ifndef ORCH_RDZV_KEYS_H
#define ORCH_RDZV_KEYS_H

#include "common/xdc_err.h"
#include "orchestrator/rdzv/orch_rdzv.h"
#include "topology/xdc_topology.h"

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#define RDZV_ROUND_END         LLONG_MAX /* the round that ends an elastic run ... */
#define RDZV_ROUND_END_NAME    "end"     /* ... by its name in keys and arrivals */
#define RDZV_NONCE_MAX         64        /* bytes of a rejoin nonce, with its NUL: [A-Za-z0-9._-] */
#define RDZV_VAL_JOIN          "join:"   /* outer/<region index>/<rank> = "join:<nonce>": a request to rejoin */
#define RDZV_KEY_RESULT        "result"
#define RDZV_KEY_FINISHED      "finished"
#define RDZV_PREFIX_REPLAN     "replan/" /* granted as a prefix: every replan/ key */
#define RDZV_PREFIX_FAILED     "failed/"
#define RDZV_KEY_DECIDER       "decider/holder" /* etcd: the round decider's role, under its lease */
#define RDZV_KEY_DECIDER_STATE "decider/state"  /* the quorum's state, with each write of the decider */

#define RDZV_BARRIER_JOINED     "joined"     /* every member joined the store */
#define RDZV_BARRIER_START      "start"      /* every member is set up */
#define RDZV_BARRIER_CHECKPOINT "checkpoint" /* every member saved its checkpoint */
#define RDZV_BARRIER_DONE       "done"       /* every member reported its statistics */

/* One key; its text in s. Returned by value: `rdzv_get(c, rdzv_key_final(step).s, ...)`. Every key of the
 * schema fits (names are bounded: a region's by XDC_WAN_NAME_MAX, a member's by RDZV_MEMBER_MAX). */
typedef struct rdzv_key {
    char s[RDZV_KEY_MAX];
} rdzv_key;

rdzv_key rdzv_key_wan(int region_idx, int rank);
rdzv_key rdzv_key_relay(int from, int to, int rank);
rdzv_key rdzv_key_outer(int region_idx, int rank);
rdzv_key rdzv_key_xchg(int region_idx, int rank);
rdzv_key rdzv_key_links(int region_idx, int rank);
rdzv_key rdzv_key_stats(int region_idx, int rank);
rdzv_key rdzv_key_ckpt(int region_idx, int rank);
rdzv_key rdzv_key_warm(int region_idx, int rank);
rdzv_key rdzv_key_metrics(const char *region, int rank);
rdzv_key rdzv_key_failed(const char *member);
rdzv_key rdzv_key_intra(const char *region);
rdzv_key rdzv_key_intra_after(const char *region, int times_left); /* a rejoining region's bootstrap */
rdzv_key rdzv_key_device(const char *region);
rdzv_key rdzv_key_replan_link(int region_idx);
rdzv_key rdzv_key_replan(long long step);
rdzv_key rdzv_key_quorum(long long round); /* RDZV_ROUND_END: quorum/end */
rdzv_key rdzv_key_final(long long step);
rdzv_key rdzv_key_lost(long long step);
rdzv_key rdzv_key_steps(long long step);
rdzv_key rdzv_key_ran(long long step);
rdzv_key rdzv_key_routes(long long step);
rdzv_key rdzv_key_left(int region_idx);
rdzv_key rdzv_key_rejoin(const char *nonce);
rdzv_key rdzv_key_back(int region_idx, int times_left);

typedef enum rdzv_key_kind {
    RDZV_KIND_WAN,
    RDZV_KIND_RELAY,
    RDZV_KIND_OUTER,
    RDZV_KIND_XCHG,
    RDZV_KIND_STATS,
    RDZV_KIND_CKPT,
    RDZV_KIND_METRICS,
    RDZV_KIND_FAILED,
    RDZV_KIND_INTRA,
    RDZV_KIND_INTRA_AFTER,
    RDZV_KIND_DEVICE,
    RDZV_KIND_REPLAN_LINK,
    RDZV_KIND_REPLAN,
    RDZV_KIND_RESULT,
    RDZV_KIND_FINISHED,
    RDZV_KIND_QUORUM,
    RDZV_KIND_FINAL,
    RDZV_KIND_LOST,
    RDZV_KIND_LEFT,
    RDZV_KIND_REJOIN,
    RDZV_KIND_STEPS,
    RDZV_KIND_LINKS,
    RDZV_KIND_ROUTES,
    RDZV_KIND_WARM,
    RDZV_KIND_RAN,
} rdzv_key_kind;

/* A key taken apart. Fields its kind does not have are -1 / "". */
typedef struct rdzv_key_parts {
    rdzv_key_kind kind;
    int region_idx; /* wan, outer, xchg, links, stats, ckpt, warm, replan/link, left; relay: from */
    int to;         /* relay */
    int rank;       /* wan, relay, outer, xchg, links, stats, ckpt, warm, metrics */
    long long
        num; /* replan, quorum (RDZV_ROUND_END: end), final, lost, steps, ran, routes: the step; intra/<r>/<n>: n */
    char name[RDZV_MEMBER_MAX]; /* metrics, intra, device: the region; failed: the member; rejoin: the nonce */
} rdzv_key_parts;

/* Take `key` (untrusted text) apart: XDC_OK and *out when it is one of the schema's keys in its canonical
 * form (rdzv_key_<kind> of the parts gives it back byte for byte), XDC_ERR_PROTO otherwise. */
xdc_err_t rdzv_key_parse(const char *key, rdzv_key_parts *out);

/* 1 when `key` is one of the member's own keys: its wan/, outer/, xchg/, links/, stats/, ckpt/, warm/, metrics/ and
 * failed/ keys, and with rank 0 its region's intra/ (both forms), device/ and replan/link/ keys. The
 * member: its name "region/host:rank", its region's name and index, its rank; *kind (NULL: not wanted) the
 * key's kind when it is. The store's admission rule. */
int rdzv_key_owned_by(const char *key, const char *member, const char *region, int region_idx, int rank,
                      rdzv_key_kind *kind);

/* ---- values -------------------------------------------------------------------------------------- */

/* A short value (a round's name, an arrival, what an exchange summed: a step, ':', one byte a region). */
typedef struct rdzv_val {
    char s[XDC_TOPO_MAX_REGIONS + 32];
} rdzv_val;

/* A round's name: its step in decimal, or "end" for RDZV_ROUND_END. It is also the arrival a worker posts
 * at outer/<region index>/<rank>, and the value of rejoin/<nonce>. */
rdzv_val rdzv_val_round(long long round);
/* A step or "end" into *round; XDC_ERR_PROTO for anything else. */
xdc_err_t rdzv_val_round_parse(const char *text, long long *round);
/* A restarted worker's request to rejoin: "join:<nonce>", or "join:<nonce>+<ran>" once it began its ran-th inner
 * step from its snapshot while it asks (elastic DiLoCo with train_while_waiting, docs/runtime.md "Rejoining"). */
rdzv_val rdzv_val_join(const char *nonce, int ran);
/* A worker's arrival at a round: plain (the round's name), or that of a rejoined worker whose state is still
 * arriving ("taking:<round>") or came since its last round ("took:<round>"): either is in the round with weight
 * 0 (quorum 't', 'c': orch_quorum.h; docs/runtime.md "Rejoining"). `ran` > 0 appends "+<ran>": a member's inner
 * steps run since it arrived, while it waits for the round's decision (train_while_waiting; the round counts them,
 * ran/<step>), or a streaming joiner's inner steps run from its snapshot while its state comes (the round leaves
 * them out: weight 0; the chaos story reads them). */
typedef enum { RDZV_ARRIVE = 0, RDZV_ARRIVE_TAKING, RDZV_ARRIVE_TOOK } rdzv_arrive_kind;
rdzv_val rdzv_val_arrival(long long round, rdzv_arrive_kind kind, int ran);
/* The value of outer/<region index>/<rank>: an arrival (*round, nonce "", *kind: how; kind may be NULL; *extra:
 * its "+<ran>", else 0; extra may be NULL) or a rejoin request (*round -1, its
 * nonce into nonce[RDZV_NONCE_MAX], *extra the steps of "join:<nonce>+<extra>"); XDC_ERR_PROTO for anything
 * else. */
xdc_err_t rdzv_val_outer_parse(const char *val, long long *round, char *nonce, rdzv_arrive_kind *kind, int *extra);
/* What a member summed in the exchange of the round at `step`: "<step>:<set>", set[r] ('1' or '0') for
 * each of the n regions (got[r] != 0). */
rdzv_val rdzv_val_xchg(long long step, const uint8_t *got, int n);
/* Its parts: *step and set[n + 1] (n characters '0'/'1' and a NUL); XDC_ERR_PROTO unless the value is one
 * step, a ':' and exactly n of them. */
xdc_err_t rdzv_val_xchg_parse(const char *val, int n, long long *step, char *set);

/* The inner steps each of n regions runs in a DiLoCo round ("nobody waits", docs/runtime.md), or ran while it
 * waited for a round's decision (ran/<step>): "<h0>,<h1>,...", one decimal count per region (0: not in the round),
 * into out[cap] (RDZV_VALUE_MAX holds any n). */
void rdzv_val_steps(const int *h, int n, char *out, size_t cap);
/* Its counts into h[n]; XDC_ERR_PROTO unless the value is exactly n counts of at most 9 digits. */
xdc_err_t rdzv_val_steps_parse(const char *val, int n, int *h);
/* Who holds an etcd member's name (orch_rdzv_etcd.c's _rdzv/joined/<member>, written by each process of the
 * member when it joins, read by the next one and by the host): its generation (XDC_RDZV_GENERATION: the
 * launcher's restart count of the member's region, 0 the first), its lease ID, and the SHA-256 of its client
 * certificate in hex ('-' without one). Text: "<generation>:<lease>:<certificate>". */
typedef struct rdzv_holder {
    long long generation;
    char lease[24]; /* decimal, as etcd writes it */
    char cert[72];
} rdzv_holder;
typedef struct rdzv_holder_text {
    char s[128];
} rdzv_holder_text;
rdzv_holder_text rdzv_val_holder(const rdzv_holder *h);
/* Its parts; XDC_ERR_PROTO unless the text is a generation, a lease ID and a certificate's digest (or '-'). */
xdc_err_t rdzv_val_holder_parse(const char *val, rdzv_holder *out);

#endif /* ORCH_RDZV_KEYS_H */
