/* orch_test_hook.c — the test hook XDC_TEST_REJOIN=<fault>@<region>[,<fault>@<region>...]
 * (tests/e2e/test_elastic.c) that the state hand-over (orch_rejoin.c) and the warm rejoin (orch_snapshot.c)
 * fire at the run's own events, one fault per process; those files say what each fault does. */
#include "orchestrator/worker/orch_worker.h"

#include "common/xdc_log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int orch_rejoin_test_fault(const orch_worker *w, const char *fault)
{
    static int fired;
    const char *v = getenv("XDC_TEST_REJOIN");
    char want[128];
    snprintf(want, sizeof want, "%s@%s", fault, w->id->region);
    size_t n = strlen(want);
    for (const char *e = v; !fired && e && *e; e = strchr(e, ',') ? strchr(e, ',') + 1 : NULL) {
        if (strncmp(e, want, n) != 0 || (e[n] != ',' && e[n] != '\0')) continue;
        XDC_WARN(XDC_SUB_ORCH, "test hook XDC_TEST_REJOIN=%s fires in region %s", want, w->id->region);
        return fired = 1;
    }
    return 0;
}
