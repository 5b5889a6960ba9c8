/* orch_decider.h — who decides an elastic run's rounds (the quorum, a round's final set, who rejoins, the
 * run's end: orch_quorum.h), and how that role moves from one process to another (docs/runtime.md, "Who
 * decides").
 *
 * With the built-in store the store's host (`xdc launch` or `xdc coordinator`) decides: the store and the
 * decider live and end together. With etcd the role is a key, RDZV_KEY_DECIDER, held under an etcd lease
 * (rdzv_server_role): every `xdc coordinator` or `xdc launch` of the run stands for it, the first one holds
 * it and the others (`xdc coordinator --standby`) stand by. When the holder dies, or is stopped or cut off
 * past its lease, a standby takes the role, reads the quorum's state from RDZV_KEY_DECIDER_STATE and goes
 * on from there: it finishes the open round (its final set, from what the members posted) and decides the
 * next ones. Every write of the holder carries that state in the same etcd transaction, fenced on the
 * holder's lease, so the state in the store is always the one that goes with the keys written, and a holder
 * deposed while it was stopped writes nothing (etcd refuses; it stands by again).
 *
 * What does not move: the grace window of a round being waited for starts again at the new holder (the
 * old one's clock is not in the store), and a standby's own agents (`xdc launch`) are its own: a launch that
 * does not decide still restarts them, and reports their failure to the store (failed/<member>) for the
 * holder to drop their region at once. A process that does not hold the role reads the holder's state into
 * its quorum now and then (its view of who is in the run: restarts, the end, --chaos). */
#ifndef ORCH_DECIDER_H
#define ORCH_DECIDER_H

#include "common/xdc_err.h"
#include "orchestrator/elastic/orch_quorum.h"
#include "orchestrator/rdzv/orch_rdzv.h"

#include <stddef.h>

typedef struct orch_decider {
    orch_quorum *q;               /* the quorum it decides with (orch_quorum_init'ed) */
    char holder[RDZV_MEMBER_MAX]; /* this process, as the role key names it: "<host>:<pid>" */
    int ttl_s;                    /* the role's lease (etcd) */
    int held;                     /* this process decides now */
    int lapsed;                   /* orch_decider_lapse: not standing for the role until another process holds it */
    uint64_t next_load;           /* not held: when to read the holder's state again (xdc_now_ns) */
    uint64_t next_try;            /* not held: when to stand for the role again (xdc_now_ns) */
    char loaded[RDZV_VALUE_MAX];  /* not held: the holder's state read last */
} orch_decider;

/* Stand for deciding with q (its store, its topology) under a lease of ttl_s (0: RDZV_ETCD_TTL_S). */
void orch_decider_init(orch_decider *d, orch_quorum *q, int ttl_s);
/* The launcher's tick: take the role when it is free (then the quorum's state is the store's) and say
 * whether this process decides now (*held; built-in: always). Deciding itself is orch_quorum_tick's.
 * An error when etcd did not answer (not held). */
xdc_err_t orch_decider_tick(orch_decider *d, int *held, xdc_diag *diag);
/* --chaos kill-decider on the holder that is this process: let the role go as if this process died (its
 * lease runs out, it writes nothing more as the holder) and stand by again only once another process holds
 * the role. Built-in store: nothing. */
void orch_decider_lapse(orch_decider *d);
/* The quorum's state as the store keeps it, into out[cap] (a line of text); its length. For
 * rdzv_server_role, and tests. */
size_t orch_decider_state(void *q, char *out, size_t cap);
/* Load a state orch_decider_state wrote into q (orch_quorum_init'ed for the same topology). XDC_ERR_PROTO
 * with diag saying what is wrong when it does not parse or does not fit the topology. */
xdc_err_t orch_decider_load(orch_quorum *q, const char *state, xdc_diag *diag);

#endif /* ORCH_DECIDER_H */
