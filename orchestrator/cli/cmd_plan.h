/* cmd_plan.h — what `xdc plan` and `xdc simulate` share: loading the topology and the model (or run)
 * file into the planner's plain inputs, and printing a plan for people. */
#ifndef CMD_PLAN_H
#define CMD_PLAN_H

#include "scheduler/xdc_plan.h"

#include <stdio.h>

typedef struct plan_inputs {
    xdc_topology *topo;
    xdc_model_shape shape;
    xdc_batch_shape batch;
    xdc_plan_opts opts;
    char model_path[512];
    char compute[256]; /* the compute model planned with and where its figure came from (orch_plan_compute_describe) */
} plan_inputs;

/* Load the topology and either a model file (model_path) or a run file (run_path: its model, and its
 * mode, stages, microbatches, codec, bucket and period become constraints). global_tokens > 0 sets the
 * global batch; else it is microbatch x microbatches x workers. Returns a sysexits code: 0 on success;
 * otherwise it printed what went wrong and holds nothing. */
int plan_inputs_load(const char *topo_path, const char *model_path, const char *run_path, double global_tokens,
                     plan_inputs *in);
void plan_inputs_free(plan_inputs *in);

/* Search, printing the reason and returning a sysexits code when no plan is possible. */
int plan_inputs_search(plan_inputs *in, xdc_plan_set **out);

void plan_print(FILE *f, const xdc_topology *t, const xdc_plan *p);

#endif /* CMD_PLAN_H */
