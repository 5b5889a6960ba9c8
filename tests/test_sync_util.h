/* test_sync_util.h — a shared fixture for the cross-region sync tests (tests/sync/): up to SYNC_NET_MAX "regions"
 * in one process, each pair of linked ones joined by a loopback WAN pair (the lower region listens, the higher
 * dials), a comm engine and one sync each. */
#ifndef XDC_TEST_SYNC_UTIL_H
#define XDC_TEST_SYNC_UTIL_H

#include "tests/test_wan_util.h"

#include "sync/xdc_sync.h"

#include <stddef.h>

#define SYNC_NET_MAX 4

typedef struct {
    int n;
    wan_test_pair pair[SYNC_NET_MAX][SYNC_NET_MAX]; /* [a][b], a < b, where linked */
    int linked[SYNC_NET_MAX][SYNC_NET_MAX];
    xdc_wan_peer *peers[SYNC_NET_MAX][SYNC_NET_MAX]; /* per region: its linked regions' peers (the syncs keep them) */
    xdc_sync_engine *eng[SYNC_NET_MAX];
    xdc_sync *sync[SYNC_NET_MAX];
    float *buf[SYNC_NET_MAX]; /* (elems) each region's contribution, then the round's result */
} sync_net;

/* n regions, every pair linked (chain 0: a full mesh) or only neighbours (chain 1: 0 - 1 - ... - n-1), each a
 * sync `name` over `elems` fp32 in buckets of `bucket` with codec `codec`, `route` its first routes (NULL: direct). */
void sync_net_open(sync_net *m, int n, int chain, size_t elems, size_t bucket, const char *codec, const int *route,
                   const char *name);
void sync_net_close(sync_net *m);

#endif
