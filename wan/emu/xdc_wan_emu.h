/* xdc_wan_emu.h — the WAN emulator (library wan/emu/, `xdc wan-emu`, the launcher): userspace relays
 * that carry TCP connections through a link model (rate, delay, jitter, modelled loss, outages), the
 * network-namespace mode (root only: TUN devices, `tc tbf`, a packet wire with real loss) and the
 * measurement of a link against its model. Independent of the transport (wan/xdc_wan.h): it relays
 * bytes, whatever speaks over them. */
#ifndef XDC_WAN_EMU_H
#define XDC_WAN_EMU_H

#include "common/xdc_err.h"

#include <stddef.h>
#include <stdint.h>

/* ---- userspace WAN emulator relay ---------------------------------------------------------------- */

typedef struct xdc_wan_relay xdc_wan_relay;

typedef struct xdc_wan_link_model {
    double rate_mbps; /* bottleneck rate per direction (token bucket); 0 = unlimited */
    double rtt_ms;    /* round trip: each direction gets rtt/2 of one-way delay */
    double jitter_ms; /* uniform extra one-way delay in [0, jitter); never reorders bytes */
    double loss_pct;  /* per 1448-byte segment: a loss stalls the direction for one RTT */
    uint64_t seed;    /* jitter and loss draws */
} xdc_wan_link_model;

/* Listen on listen_host:listen_port (0 = any) and forward every accepted connection to
 * target_host:target_port through the link model, in a thread of its own. */
xdc_err_t xdc_wan_relay_create(const char *listen_host, int listen_port, const char *target_host, int target_port,
                               const xdc_wan_link_model *m, xdc_wan_relay **out, xdc_diag *diag);
int xdc_wan_relay_port(const xdc_wan_relay *r);
/* Another listening port on the same link, forwarding to another target: every route of a relay shares
 * its token buckets, delay line model and outages, so K worker pairs crossing one link share its rate
 * as they would on the real link. *bound_port receives the port listened on. */
xdc_err_t xdc_wan_relay_add_route(xdc_wan_relay *r, const char *listen_host, int listen_port, const char *target_host,
                                  int target_port, int *bound_port, xdc_diag *diag);
/* Outage: reset every relayed connection and refuse new ones until restored. */
void xdc_wan_relay_cut(xdc_wan_relay *r);
void xdc_wan_relay_restore(xdc_wan_relay *r);
/* A schedule of outages: each cuts the link for duration_ms, start_ms after the schedule was given. An
 * in-flight one, once due, waits for the link to carry a transfer (16 KiB or more on their way in one
 * direction of one connection, more than a handshake, or a sender held back by the link's rate) and cuts it then, so that frames are lost mid-way
 * whatever the run was doing at start_ms; outages after it wait with it, and one still waiting when the link
 * is closed never happens. */
#define XDC_WAN_MAX_OUTAGES 16
typedef struct xdc_wan_outage {
    int64_t start_ms, duration_ms;
    int in_flight;
} xdc_wan_outage;
/* Append "DURATION@START[:in-flight][,...]" (e.g. "3s@10s,12s@40s:in-flight") to sched[*n] (capacity
 * XDC_WAN_MAX_OUTAGES). XDC_ERR_INVALID naming the part that is not DURATION@START[:in-flight],
 * XDC_ERR_RANGE when the schedule is full; *n is unchanged then. */
xdc_err_t xdc_wan_outages_parse(const char *text, xdc_wan_outage *sched, int *n, xdc_diag *diag);
/* Add outage `o` (its start counted from now) to the relay's schedule (outages already scheduled stay;
 * overlapping ones merge). XDC_ERR_RANGE when XDC_WAN_MAX_OUTAGES are pending. */
xdc_err_t xdc_wan_relay_schedule_outage(xdc_wan_relay *r, const xdc_wan_outage *o);
/* Change the link's rate (rate_mbps as in the model; 0 = unlimited) from now on, for every route;
 * *was_mbps (may be NULL) receives the rate it had. A rate cut that ends is this call again with *was_mbps. */
void xdc_wan_relay_set_rate(xdc_wan_relay *r, double rate_mbps, double *was_mbps);
/* Connections accepted so far and bytes forwarded in both directions. */
void xdc_wan_relay_counters(xdc_wan_relay *r, uint64_t *conns, uint64_t *bytes);
/* How often the relay's thread has woken from its poll: with connections open and nothing to carry it wakes
 * only for its 50 ms housekeeping, not for the 1 ms refill tick a direction waiting on its bucket gets. */
uint64_t xdc_wan_relay_wakeups(xdc_wan_relay *r);
void xdc_wan_relay_destroy(xdc_wan_relay *r);

/* Measure a link model on loopback: a relay with model `m` in front of an echo/sink server. RTT is the
 * minimum of 15 1-byte ping-pongs (jitter and a loaded host only add to a sample); rate is the last three
 * quarters of a rate x `seconds`-byte transfer (64 MiB when unlimited) over the time between the sink's
 * quarter marker and its final count, so slow start and the pipe fill are left out. */
xdc_err_t xdc_wan_emu_measure(const xdc_wan_link_model *m, double seconds, double *rtt_ms, double *rate_mbps,
                              xdc_diag *diag);

/* ---- network-namespace emulator (root only) ----------------------------------------------------- */

typedef struct xdc_wan_netns xdc_wan_netns;

/* Create namespaces PREFIX-0 .. PREFIX-(n-1); region i gets a TUN device xw0 with address
 * 10.77.0.(i+1)/24 and a `tc tbf` qdisc at the rate of its fastest outgoing link; a wire thread carries
 * packets between them with models[from * n + to] (delay, jitter, real packet loss). Run a process in
 * region i with `ip netns exec PREFIX-i ...`. XDC_ERR_UNAVAILABLE without CAP_NET_ADMIN. */
xdc_err_t xdc_wan_netns_create(const char *prefix, int n_regions, const xdc_wan_link_model *models, xdc_wan_netns **out,
                               xdc_diag *diag);
/* Stop the wire and delete every namespace created. NULL: no-op. */
void xdc_wan_netns_destroy(xdc_wan_netns *w);
const char *xdc_wan_netns_name(const xdc_wan_netns *w, int region, char *buf, size_t cap);
/* "10.77.0.(region+1)" */
void xdc_wan_netns_addr(int region, char *buf, size_t cap);
void xdc_wan_netns_counters(xdc_wan_netns *w, uint64_t *forwarded, uint64_t *dropped);
/* Measure region from -> to through the wire (as xdc_wan_emu_measure; rate_mbps sizes the transfer). */
xdc_err_t xdc_wan_netns_measure(xdc_wan_netns *w, int from, int to, double rate_mbps, double seconds, double *rtt_ms,
                                double *measured_mbps, xdc_diag *diag);

#endif /* XDC_WAN_EMU_H */
