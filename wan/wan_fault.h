/* wan_fault.h — test-only: faults injected in-process into WAN connections through the fault I/O layer
 * (wan_io_fault.c), where the tests once needed a relay, a socket shut down behind the engine's back,
 * or network namespaces. Private to wan/ and its tests (libxdc does not export it). A fault names, per
 * direction, what happens once a byte count has passed through the layer (plaintext bytes above TLS,
 * counted from when it was armed):
 *   DROP   bytes written are reported written and discarded; bytes arriving are read and discarded (a
 *          black hole: the connection stays up, the peer falls silent);
 *   DELAY  the direction holds still for delay_ms, then goes on (once);
 *   RESET  the connection is cut (both sides see it end; this side fails with "reset by the fault layer");
 *   STALL  the direction stops for good: nothing more moves (a hung peer or a dead path with TCP alive).
 * Usage: wan_fault_enable() on an engine before it connects or listens (every connection it makes then
 * carries a pass-through fault layer), then wan_fault_arm() on a peer's live streams, or
 * wan_fault_next_dials() for the connections the engine dials next (an outage over several redials). */
#ifndef XDC_WAN_FAULT_H
#define XDC_WAN_FAULT_H

#include "wan/xdc_wan.h"

#include <stdint.h>

enum wan_fault_kind { WAN_FAULT_NONE = 0, WAN_FAULT_DROP, WAN_FAULT_DELAY, WAN_FAULT_RESET, WAN_FAULT_STALL };
enum wan_fault_dir_index { WAN_FAULT_TX = 0, WAN_FAULT_RX = 1 };

typedef struct wan_fault_dir {
    int kind;          /* enum wan_fault_kind */
    uint64_t at_bytes; /* bytes this direction passes (since arming) before the fault starts */
    int delay_ms;      /* DELAY: how long the direction holds still */
} wan_fault_dir;

typedef struct wan_fault {
    wan_fault_dir dir[2]; /* [WAN_FAULT_TX], [WAN_FAULT_RX] */
} wan_fault;

/* Give every connection the engine dials or accepts from now on a fault layer, pass-through until armed.
 * Engines without it have no fault layer at all (nothing on the data path). */
void wan_fault_enable(xdc_wan_engine *eng);
/* Arm the fault layer of the peer's stream `idx` (-1: every stream that is connected) with `f`, byte
 * counts from now. XDC_ERR_INVALID when the stream is not connected or has no fault layer. */
xdc_err_t wan_fault_arm(xdc_wan_peer *p, int idx, const wan_fault *f);
/* The next `n` connections the engine dials carry `f` from their first byte; a RESET at byte 0 cuts the
 * connection during its handshake (a link that refuses connections for n redials). */
void wan_fault_next_dials(xdc_wan_engine *eng, int n, const wan_fault *f);

#endif /* XDC_WAN_FAULT_H */
