/* test_wan_order.c — message matching when the sender runs ahead: both sides send several bulk
 * messages of different sizes before either has posted its receives (what two regions' comm engines do
 * when one finishes backward earlier), then post the receives in order. Every receive must get the
 * message of the same index, whole and unchanged. */
#include "tests/xdc_test.h"
#include "tests/test_wan_util.h"

#include "common/xdc_hash.h"

#include <stdlib.h>

#define N_MSG 6

XDC_TEST_T(wan_messages_sent_before_receives_match_in_order, 120)
{
    wan_test_pair tp;
    wan_test_pair_open(&tp, 2, 20000, NULL, NULL);
    static const size_t sizes[N_MSG] = {20000, 262144, 777, 262144, 5, 100000}; /* bytes */
    uint8_t *tx[2][N_MSG], *rx[2][N_MSG];
    uint64_t want[2][N_MSG];
    xdc_wan_request *sreq[2][N_MSG], *rreq[2][N_MSG];
    xdc_wan_peer *side[2] = {tp.srv, tp.cli};
    for (int d = 0; d < 2; d++)
        for (int i = 0; i < N_MSG; i++) {
            tx[d][i] = malloc(sizes[i]);
            rx[d][i] = malloc(sizes[i]);
            want[d][i] = wan_test_fill(tx[d][i], sizes[i], (uint64_t)(d * 100 + i));
        }
    /* Side 0 sends everything first; side 1 sends half, then posts its receives, then the rest. */
    for (int i = 0; i < N_MSG; i++)
        XDC_ASSERT_OK(xdc_wan_isend(side[0], XDC_WAN_BULK, tx[0][i], sizes[i], 1, sizes[i], &sreq[0][i]));
    for (int i = 0; i < N_MSG / 2; i++)
        XDC_ASSERT_OK(xdc_wan_isend(side[1], XDC_WAN_BULK, tx[1][i], sizes[i], 1, sizes[i], &sreq[1][i]));
    for (int i = 0; i < N_MSG; i++)
        XDC_ASSERT_OK(xdc_wan_irecv(side[1], XDC_WAN_BULK, rx[1][i], sizes[i], &rreq[1][i]));
    for (int i = N_MSG / 2; i < N_MSG; i++)
        XDC_ASSERT_OK(xdc_wan_isend(side[1], XDC_WAN_BULK, tx[1][i], sizes[i], 1, sizes[i], &sreq[1][i]));
    for (int i = 0; i < N_MSG; i++)
        XDC_ASSERT_OK(xdc_wan_irecv(side[0], XDC_WAN_BULK, rx[0][i], sizes[i], &rreq[0][i]));
    for (int d = 0; d < 2; d++)
        for (int i = 0; i < N_MSG; i++) {
            size_t got = 0;
            xdc_diag diag = {{0}};
            xdc_err_t rc = xdc_wan_wait(rreq[d][i], 20000, &got, NULL, &diag);
            XDC_ASSERT_MSG(rc == XDC_OK, "side %d receive %d: %s: %s", d, i, xdc_errname(rc), diag.msg);
            XDC_ASSERT_EQ(got, sizes[i]);
            XDC_ASSERT_MSG(xdc_xxh3(rx[d][i], got) == want[1 - d][i], "side %d message %d corrupted or swapped", d, i);
            XDC_ASSERT_OK(xdc_wan_wait(sreq[1 - d][i], 20000, NULL, NULL, &diag));
        }
    wan_test_pair_close(&tp);
    for (int d = 0; d < 2; d++)
        for (int i = 0; i < N_MSG; i++) {
            free(tx[d][i]);
            free(rx[d][i]);
        }
}
