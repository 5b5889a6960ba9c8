/* xdc.h — libxdc, the stable C API of xdc: a cross-region communicator for a program of your own (a
 * training loop in C, or a framework through a thin binding), and the hierarchical all-reduce xdc's own
 * workers run: the mean over the replicas of a region (shared memory), then over the regions (the WAN:
 * compressed with error feedback, TLS 1.3), bit-identical on every rank. docs/api.md is the manual: every
 * call, the threading rules, the environment a process reads its identity from, the status codes and
 * the versioning rule, and a complete example (examples/api/allreduce.c).
 *
 * Plain C types only: opaque handles, int status codes, NUL-terminated strings, fp32 host (or, since 0.3,
 * device) buffers, and one options structure that carries its own size, so a binding (Python ctypes) can
 * call every function.
 * Build with `pkg-config --cflags --libs xdc`. */
#ifndef XDC_H
#define XDC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The API version this header declares: major in the high 16 bits, minor in the low 16. A program built
 * against major M runs with any library of major M and a minor at least its own; a new major may change
 * or remove calls. */
#define XDC_API_VERSION_MAJOR 0
#define XDC_API_VERSION_MINOR 3
#define XDC_API_VERSION       ((XDC_API_VERSION_MAJOR << 16) | XDC_API_VERSION_MINOR)

/* The version of the library loaded at run time (compare its major, version >> 16, with the header's). */
int xdc_api_version(void);

/* Status codes: every call that can fail returns one. The values are stable across versions; a new
 * version may add codes, never renumber one. */
enum {
    XDC_SUCCESS = 0,
    XDC_STATUS_INVALID = 1,      /* a bad argument, or a call out of order (a second round on a tag in flight) */
    XDC_STATUS_NOMEM = 2,        /* out of memory */
    XDC_STATUS_IO = 3,           /* a file could not be read or written */
    XDC_STATUS_CONFIG = 4,       /* the topology, the run file or the identity from the environment */
    XDC_STATUS_PROTOCOL = 5,     /* a peer or the rendezvous answered something unexpected */
    XDC_STATUS_CORRUPT = 6,      /* data failed its checksum or format check */
    XDC_STATUS_RANGE = 7,        /* a value out of range */
    XDC_STATUS_TIMEOUT = 8,      /* xdc_request_wait: the deadline passed, the request is still pending */
    XDC_STATUS_IN_PROGRESS = 9,  /* xdc_request_test: not complete yet */
    XDC_STATUS_CLOSED = 10,      /* the communicator or a connection was closed */
    XDC_STATUS_UNAVAILABLE = 11, /* a peer, the rendezvous or a resource is not there */
    XDC_STATUS_PEER_LOST = 12,   /* a peer failed */
    XDC_STATUS_TLS = 13,         /* TLS failure */
    XDC_STATUS_AUTH = 14,        /* a peer's certificate was refused, or names another member than expected */
    XDC_STATUS_UNSUPPORTED = 15, /* not supported by this build or this version */
    XDC_STATUS_DEVICE = 16,      /* CUDA or NCCL error */
    XDC_STATUS_INTERNAL = 17,    /* a bug in xdc */
    XDC_STATUS_INTERRUPTED = 18  /* interrupted by a signal */
};

/* A short text for a status code ("deadline passed; the request is still pending"); never NULL. */
const char *xdc_status_string(int status);

/* A member of a run: this process's place among the regions, its connections and its all-reduce state. */
typedef struct xdc_comm xdc_comm;
/* The all-reduce in flight on one tag of a communicator (owned by the communicator). */
typedef struct xdc_request xdc_request;

/* Where a communicator comes from. Every field left NULL / -1 is read from the environment the launcher
 * sets (`xdc launch --exec`, `xdc agent --exec`; docs/api.md). */
typedef struct xdc_comm_options {
    uint32_t struct_size; /* sizeof(xdc_comm_options), as compiled into the caller */
    uint32_t api_version; /* XDC_API_VERSION, as compiled into the caller */
    const char *topology; /* topology file; NULL: $XDC_TOPOLOGY */
    const char *config;   /* run file (codec, bucket size, timeouts); NULL: $XDC_CONFIG */
    const char *run_dir;  /* run folder (its certs/ holds the credentials by default); NULL: $XDC_RUN_DIR */
    int emulate_wan;      /* 1: dial the other regions through the launcher's relays; -1: $XDC_EMULATE_WAN */
} xdc_comm_options;

#define XDC_COMM_OPTIONS_INIT                                                                                      \
    {                                                                                                              \
        .struct_size = sizeof(xdc_comm_options), .api_version = XDC_API_VERSION, .topology = NULL, .config = NULL, \
        .run_dir = NULL, .emulate_wan = -1                                                                         \
    }

/* Join the run: read the identity (region, rank, coordinator) from the environment contract, connect to
 * the rendezvous, the other members of this region (shared memory) and the same rank of every other
 * region (TLS), and wait until every member of the run has joined. Collective: every member calls it.
 * opts may be NULL (everything from the environment). On failure *out is NULL, and the diagnostic (which
 * file:line:col, which variable, which peer) is written to err[err_cap] when err is not NULL. */
int xdc_comm_create(const xdc_comm_options *opts, xdc_comm **out, char *err, size_t err_cap);

/* The run's end for this member: wait until every member reached its own xdc_comm_finalize (so no peer
 * leaves while another still exchanges with it). Collective; call it before xdc_comm_destroy on success. */
int xdc_comm_finalize(xdc_comm *comm);

/* Tear down (connections, the comm thread, every tag's state). Without xdc_comm_finalize first the
 * other members see this one leave (a failure, as a crash would be). NULL: no-op. */
void xdc_comm_destroy(xdc_comm *comm);

/* The diagnostic of the last call on comm that failed ("" if none): what failed and why, naming the peer,
 * file or variable. Valid until the next call on comm. */
const char *xdc_comm_last_error(const xdc_comm *comm);

/* This member's place: global rank and size over every region; its region's index, name and count. */
int xdc_comm_rank(const xdc_comm *comm);
int xdc_comm_size(const xdc_comm *comm);
int xdc_comm_region(const xdc_comm *comm);
int xdc_comm_num_regions(const xdc_comm *comm);
const char *xdc_comm_region_name(const xdc_comm *comm);
/* Since 0.3. This member's rank within its region and the region's member count (the global ranks of a
 * region are consecutive: rank = the earlier regions' members + region rank). */
int xdc_comm_region_rank(const xdc_comm *comm);
int xdc_comm_region_size(const xdc_comm *comm);

/* All-reduce `count` fp32 values of `buf` (host memory) in place to their mean over every member of the
 * run, with the run file's WAN codec. `tag` (0 <= tag < XDC_MAX_TAGS) names a buffer: its first use fixes
 * its count and allocates its state (buckets, codec contexts, the error-feedback residual, which carries
 * over from one call to the next); later calls on the tag must pass the same count. Every member calls
 * with the same tags in the same order. Blocks until the mean is in buf. */
#define XDC_MAX_TAGS 1024
int xdc_allreduce(xdc_comm *comm, int tag, float *buf, size_t count);

/* The same without waiting: the round starts at once (on the communicator's comm thread) and *req names
 * it. buf must not be touched until the request completed. One round per tag at a time. */
int xdc_iallreduce(xdc_comm *comm, int tag, float *buf, size_t count, xdc_request **req);

/* XDC_SUCCESS when the request completed (the mean is in its buffer), XDC_STATUS_IN_PROGRESS when not yet,
 * or the round's error. Does not block. */
int xdc_request_test(xdc_request *req);

/* Wait for the request at most timeout_ms milliseconds (< 0: no deadline; a peer silent past the run
 * file's operation timeout still fails the round). XDC_SUCCESS when it completed; XDC_STATUS_TIMEOUT when
 * the deadline passed first: the round goes on, wait or test again. After completion the request is
 * finished: a further wait or test returns XDC_STATUS_INVALID. */
int xdc_request_wait(xdc_request *req, int64_t timeout_ms);

/* DiLoCo outer rounds over a parameter list (n_params buffers of counts[i] fp32, host memory): each region
 * trains on its own between rounds; a round averages the pseudo-gradient (the parameters at the last round
 * minus now) over every member with the run file's codec and error feedback, takes an outer Nesterov step
 * with the run file's diloco.outer_lr and diloco.outer_momentum (m = mu m + delta; global -= lr (delta +
 * mu m)), and writes the new global parameters into every buffer: every member ends with the same values.
 * xdc_outer_init takes the starting point (the parameters now) and allocates the tag's state once;
 * xdc_outer_round (collective, blocking) runs one round, with the same list shape (the buffers may move).
 * The tag is then an outer tag: xdc_allreduce on it is XDC_STATUS_INVALID. */
int xdc_outer_init(xdc_comm *comm, int tag, int n_params, float *const *params, const size_t *counts);
int xdc_outer_round(xdc_comm *comm, int tag, float *const *params);

/* Since 0.3. What a tag's outer rounds do beyond xdc_outer_round's default (call before its first round;
 * initialise with XDC_OUTER_OPTIONS_INIT). keep_unsent: what the codec did not send of this member's
 * pseudo-gradient stays in its parameters (params = global - residual after each round but the last)
 * instead of in the codec's error-feedback residual, as the C runtime's diloco.keep_unsent; needs one member
 * per region (XDC_STATUS_INVALID otherwise). final_codec: the codec of xdc_outer_last_round ("": the run's;
 * NULL: the run file's diloco.final_codec), a codec name as in the run file. */
typedef struct xdc_outer_options {
    uint32_t struct_size;    /* sizeof(xdc_outer_options), as compiled into the caller */
    int keep_unsent;         /* 0 (default) or 1 */
    const char *final_codec; /* read during the call */
} xdc_outer_options;

#define XDC_OUTER_OPTIONS_INIT                                                          \
    {                                                                                   \
        .struct_size = sizeof(xdc_outer_options), .keep_unsent = 0, .final_codec = NULL \
    }
int xdc_outer_configure(xdc_comm *comm, int tag, const xdc_outer_options *opts);
/* Since 0.3. The tag's last round (collective, blocking): in the final codec, and with keep_unsent the
 * plain mean of the members' parameters (lr 1, momentum 0: they hold their unsent parts); every member
 * ends with the same values. The tag takes no round after it (XDC_STATUS_INVALID). */
int xdc_outer_last_round(xdc_comm *comm, int tag, float *const *params);
/* Since 0.3. An outer round overlapped with the caller's next inner steps (docs/api.md, "Overlapped outer
 * rounds"): xdc_outer_begin takes the pseudo-gradient of params now and posts its exchange, and returns;
 * the caller trains on; xdc_outer_apply (collective, blocking until the exchange is done) takes the outer
 * step and writes global' + (params - params at begin) (- residual with keep_unsent) into params: the
 * progress since begin is kept, the global parameters are the same on every member. One round in flight
 * per tag; xdc_outer_round and xdc_outer_last_round need none in flight. */
int xdc_outer_begin(xdc_comm *comm, int tag, float *const *params);
int xdc_outer_apply(xdc_comm *comm, int tag, float *const *params);
/* Since 0.3. The tag's outer state, for checkpoints (between rounds): *n_params fp32 each of the global
 * parameters and the momentum, and *n_residual fp32 of the codec's error-feedback residual (0 for an exact
 * codec or one region). get copies them into the caller's host buffers, set from them (residual may be
 * NULL when *n_residual is 0); a resumed program that sets what a run got encodes exactly as it would have. */
int xdc_outer_state_size(xdc_comm *comm, int tag, size_t *n_params, size_t *n_residual);
int xdc_outer_get_state(xdc_comm *comm, int tag, float *global, float *momentum, float *residual);
int xdc_outer_set_state(xdc_comm *comm, int tag, const float *global, const float *momentum, const float *residual);

/* Since 0.2. What this member's WAN connections carried so far (to and from the same rank of every other
 * region, every tag and outer round included; the intra-region shared memory is not WAN). Initialise with
 * XDC_COMM_STATS_INIT: the library writes only the fields the caller's struct_size covers. */
typedef struct xdc_comm_stats {
    uint32_t struct_size;    /* sizeof(xdc_comm_stats), as compiled into the caller */
    uint64_t wan_tx_bytes;   /* payload bytes sent and acknowledged (after the codec) */
    uint64_t wan_rx_bytes;   /* payload bytes received */
    uint64_t wan_raw_bytes;  /* the fp32 bytes the sent payload stands for (before the codec) */
    uint64_t wan_wire_bytes; /* frame headers + payload written, retransmissions included (before TLS) */
} xdc_comm_stats;

#define XDC_COMM_STATS_INIT                   \
    {                                         \
        .struct_size = sizeof(xdc_comm_stats) \
    }
int xdc_comm_get_stats(xdc_comm *comm, xdc_comm_stats *out);

/* Since 0.2. Check that every member passed the same value (collective, blocking; e.g. a hash of the
 * parameters every member starts from): XDC_SUCCESS when they did, XDC_STATUS_CORRUPT when not (on every
 * member; the diagnostic says which digit differed, not which member). An all-reduce of the value's digits
 * and their squares with codec none, whatever the run file's codec, on a state of its own (no tag); it is
 * ordered with the rounds posted before it as any round is. */
int xdc_comm_check_same(xdc_comm *comm, uint64_t value);

/* ---- Since 0.3: device memory ---------------------------------------------------------------------------
 * The same calls over buffers in device memory, with the caller's stream. The device is the one the
 * environment variable XDC_DEVICE names, read at the first device call: "cuda" (the default) or "cpu-strict"
 * (xdc's strict CPU stand-in for a GPU, for tests without one); `device` is its ordinal (CUDA: the GPU the
 * buffers are on). `stream` is the caller's stream the buffers are written and read on, as
 * __cuda_array_interface__ gives it (CUDA: a cudaStream_t; NULL or 1 the legacy default stream, 2 the
 * per-thread default stream; cpu-strict: NULL, the calling thread's current stream). The tag's state (codec
 * contexts, error-feedback residual, the outer state: global parameters and momentum, fp32) lives on that
 * device and its work (the codec included) runs on streams of xdc's own, after the work queued on `stream`
 * so far (an event recorded there); only the encoded bytes cross to pinned host memory for the WAN. When a
 * call returns (a request completes), `stream` waits on xdc's completion event: work queued there afterwards
 * reads the result, and the host is not blocked by it (read on the host only after synchronizing `stream`).
 * The calling thread's bound device is left as it was. A tag is host or device from its first use; with more
 * than one member in a region the device calls are XDC_STATUS_UNSUPPORTED (the region's communicator is host
 * shared memory). Not yet run on a GPU (docs/api.md). */
int xdc_allreduce_device(xdc_comm *comm, int tag, float *buf, size_t count, int device, void *stream);
int xdc_iallreduce_device(xdc_comm *comm, int tag, float *buf, size_t count, int device, void *stream,
                          xdc_request **req);
int xdc_outer_init_device(xdc_comm *comm, int tag, int n_params, float *const *params, const size_t *counts, int device,
                          void *stream);
/* On the tag's device (the one given to xdc_outer_init_device): as xdc_outer_round, xdc_outer_last_round,
 * xdc_outer_begin and xdc_outer_apply. xdc_outer_configure and the outer state calls (host buffers) take host
 * and device tags alike. A host tag refuses the *_device calls, a device tag the host ones
 * (XDC_STATUS_INVALID). */
int xdc_outer_round_device(xdc_comm *comm, int tag, float *const *params, void *stream);
int xdc_outer_last_round_device(xdc_comm *comm, int tag, float *const *params, void *stream);
int xdc_outer_begin_device(xdc_comm *comm, int tag, float *const *params, void *stream);
int xdc_outer_apply_device(xdc_comm *comm, int tag, float *const *params, void *stream);

/* Since 0.3. Device memory of XDC_DEVICE's device `device` for a program without a runtime of its own (and
 * the tests on cpu-strict): allocate `bytes` (zero-filled), free (NULL: no-op), and copy `bytes` between host
 * memory and it (to_device: src host, dst device; else the other way), queued on `stream` (as above) and
 * waited for. */
int xdc_device_alloc(xdc_comm *comm, int device, size_t bytes, void **out);
void xdc_device_free(xdc_comm *comm, void *p);
int xdc_device_copy(xdc_comm *comm, int device, void *dst, const void *src, size_t bytes, int to_device, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* XDC_H */
