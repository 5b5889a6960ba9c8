/* test_sync_util.c — the sync tests' fixture (test_sync_util.h). */
#include "tests/test_sync_util.h"
#include "tests/xdc_test.h"

#include <stdlib.h>
#include <string.h>

void sync_net_open(sync_net *m, int n, int chain, size_t elems, size_t bucket, const char *codec, const int *route,
                   const char *name)
{
    memset(m, 0, sizeof *m);
    XDC_ASSERT(n >= 2 && n <= SYNC_NET_MAX);
    m->n = n;
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++) {
            if (chain && b != a + 1) continue;
            m->linked[a][b] = m->linked[b][a] = 1;
            wan_test_pair_open(&m->pair[a][b], 2, 20000, NULL, NULL);
            m->peers[a][b] = m->pair[a][b].srv;
            m->peers[b][a] = m->pair[a][b].cli;
        }
    for (int r = 0; r < n; r++) {
        xdc_sync_cfg cfg = {.n_elems = elems,
                            .bucket_elems = bucket,
                            .peers = m->peers[r],
                            .n_regions = n,
                            .my_region = r,
                            .route = route,
                            .name = name};
        cfg.codec = (xdc_codec_cfg)XDC_CODEC_CFG_INIT;
        XDC_ASSERT_OK(xdc_codec_parse(codec, &cfg.codec, NULL));
        XDC_ASSERT_OK(xdc_sync_engine_create(&m->eng[r], NULL));
        xdc_diag d = {{0}};
        xdc_err_t rc = xdc_sync_create(m->eng[r], &cfg, &m->sync[r], &d);
        XDC_ASSERT_MSG(rc == XDC_OK, "region %d: %s", r, d.msg);
        m->buf[r] = malloc(elems * sizeof(float));
        XDC_ASSERT(m->buf[r] != NULL);
    }
}

void sync_net_close(sync_net *m)
{
    for (int r = 0; r < m->n; r++) {
        xdc_sync_destroy(m->sync[r]);
        xdc_sync_engine_destroy(m->eng[r]);
        free(m->buf[r]);
    }
    for (int a = 0; a < m->n; a++)
        for (int b = a + 1; b < m->n; b++)
            if (m->linked[a][b]) wan_test_pair_close(&m->pair[a][b]);
}
