/* test_symbol_cycles.c — tests/check_symbol_cycles.sh: the orchestrator's object files use each other's
 * symbols without a cycle (docs/design.md, "Layers"), and the check catches one planted in synthetic
 * `nm -A` output. */
#include "tests/xdc_test.h"

#include <stdio.h>
#include <string.h>

/* The objects this test binary was built from: next to it (XDC_BIN_PATH is BUILD/xdc). */
XDC_TEST(layering_orchestrator_objects_have_no_symbol_cycle)
{
    char cmd[1024], out[8192];
    snprintf(cmd, sizeof cmd, "bash tests/check_symbol_cycles.sh \"$(dirname %s)/obj/orchestrator\"", XDC_BIN_PATH);
    int rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "symbol cycles among the orchestrator's objects:\n%s", out);
}

/* Three objects in a cycle (a uses b's, b uses c's, c uses a's), one that only uses them, and a file-local
 * definition that draws no edge. */
XDC_TEST(layering_symbol_cycle_check_catches_a_planted_cycle)
{
    char path[600], cmd[1024], out[8192];
    snprintf(path, sizeof path, "%s/nm.txt", xdc_test_tmpdir());
    FILE *f = fopen(path, "w");
    XDC_ASSERT(f != NULL);
    fputs("obj/x/a.o:0000000000000000 T a_fn\n"
          "obj/x/a.o:                 U b_fn\n"
          "obj/x/b.o:0000000000000010 T b_fn\n"
          "obj/x/b.o:                 U c_data\n"
          "obj/x/c.o:0000000000000000 D c_data\n"
          "obj/x/c.o:                 U a_fn\n"
          "obj/x/top.o:0000000000000000 T top\n"
          "obj/x/top.o:                 U a_fn\n"
          "obj/x/top.o:                 U local_fn\n"
          "obj/x/d.o:0000000000000000 t local_fn\n"
          "obj/x/d.o:0000000000000000 T d_fn\n",
          f);
    XDC_ASSERT(fclose(f) == 0);
    snprintf(cmd, sizeof cmd, "bash tests/check_symbol_cycles.sh --nm %s", path);
    int rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 1, "check exited %d on a planted cycle:\n%s", rc, out);
    XDC_ASSERT_STR_CONTAINS(out, "cycle: a.o -> (b_fn) b.o -> (c_data) c.o -> (a_fn) a.o");
    XDC_ASSERT(strstr(out, "top.o") == NULL); /* it uses the cycle, it is not on it */
    XDC_ASSERT(strstr(out, "d.o") == NULL);   /* a file-local definition draws no edge */

    /* Without the cycle it passes. */
    snprintf(cmd, sizeof cmd, "sed -i '/obj\\/x\\/[abc]\\.o/d' %s && bash tests/check_symbol_cycles.sh --nm %s", path,
             path);
    rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "check exited %d without the planted cycle:\n%s", rc, out);
}
