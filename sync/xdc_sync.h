/* xdc_sync.h — the comm engine: a thread that averages one fp32 buffer (a stage's gradients, or a
 * DiLoCo pseudo-gradient) across the data-parallel replicas of a region and across regions, bucket by
 * bucket, so the work overlaps compute:
 *   intra reduce-scatter over the replicas → WAN exchange of this rank's shard with the same rank of
 *   every other region (codec + error feedback, TLS, its own streams) → intra all-gather.
 * Buckets are processed from the end of the buffer towards the start (the order backward produces
 * them); a bucket goes as soon as the caller marks it final. Every region decodes every contribution,
 * its own included, and sums them in region order, so all regions end with bit-identical results. */
#ifndef XDC_SYNC_H
#define XDC_SYNC_H

#include "common/xdc_err.h"
#include "compression/xdc_codec.h"
#include "intra/xdc_intra.h"
#include "wan/xdc_wan.h"

#include <stddef.h>
#include <stdint.h>

typedef struct orch_trace orch_trace;

typedef struct xdc_sync_cfg {
    size_t n_elems;       /* buffer length, fp32 */
    size_t bucket_elems;  /* elements per bucket (rounded up to a multiple of the replica count) */
    xdc_intra_comm *dp;   /* data-parallel group of this stage in this region; NULL when alone */
    xdc_wan_peer **peers; /* (n_regions) the same rank in each other region; NULL at my_region */
    int n_regions, my_region;
    xdc_codec_cfg codec; /* WAN codec (n_elems is filled per bucket shard) */
    const char *name;    /* for logs: "grads", "pseudo-grads" */
} xdc_sync_cfg;

typedef struct xdc_sync_stats {
    uint64_t wan_tx_bytes;  /* encoded bytes sent to all peers */
    uint64_t wan_raw_bytes; /* the fp32 bytes they stand for */
    double wan_seconds;     /* comm-thread time spent in WAN exchanges (encode, transfer, decode) */
    double intra_seconds;   /* comm-thread time in reduce-scatter and all-gather */
} xdc_sync_stats;

typedef struct xdc_sync xdc_sync;

/* Allocates every buffer and codec context once and starts the comm thread. */
xdc_err_t xdc_sync_create(const xdc_sync_cfg *cfg, xdc_sync **out, xdc_diag *diag);
/* Stop and join the comm thread (a wait in progress ends with XDC_ERR_CLOSED). Buffers stay allocated:
 * requests still posted with the WAN engine may write into them until the engine is destroyed, so a
 * caller tears down as stop -> destroy the engine -> xdc_sync_destroy. NULL: no-op. */
void xdc_sync_stop(xdc_sync *s);
/* Stop (if not yet) and free. NULL: no-op. */
void xdc_sync_destroy(xdc_sync *s);

/* Start a round on `buf` (n_elems fp32, not touched by the caller until xdc_sync_end returns). Nothing
 * moves until elements are marked final. */
xdc_err_t xdc_sync_begin(xdc_sync *s, float *buf);
/* Elements [from, n_elems) are final: every bucket entirely inside goes now. */
void xdc_sync_mark_ready(xdc_sync *s, size_t from);
/* Mark everything final and wait until every bucket holds the average over replicas and regions. There
 * is no total deadline (another region may be slower); a peer silent past the WAN engine's liveness
 * deadline or a replica past the intra op timeout fails the round, with the peer named in diag, as does
 * a corrupt chunk. */
xdc_err_t xdc_sync_end(xdc_sync *s, xdc_diag *diag);
/* Switch the WAN codec between rounds (a re-plan): every bucket gets a new context of the new kind
 * that keeps its error-feedback residual. Every region must switch at the same step. */
xdc_err_t xdc_sync_set_codec(xdc_sync *s, const xdc_codec_cfg *codec, xdc_diag *diag);
/* Cumulative statistics. */
void xdc_sync_get_stats(xdc_sync *s, xdc_sync_stats *out);

#endif /* XDC_SYNC_H */
