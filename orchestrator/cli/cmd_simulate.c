/* cmd_simulate.c — `xdc simulate -t TOPOLOGY (-m MODEL.yaml | -c RUN.yaml) [--steps N] [--json]
 * [--calibrate-compute S[,S...]] [--calibrate-ratio R] [--calibrate-p2p S] [--wan-gbps G]`: plan (or take the run
 * file's configuration as constraints), then replay the plan in the discrete-event simulator and print the
 * predicted step time, its split and the GPU utilisation next to the planner's closed-form prediction. */
#include "orchestrator/cli/cmd_plan.h"

#include "common/xdc_parse.h"
#include "common/xdc_time.h"
#include "orchestrator/cli/xdc_cli.h"

#include <getopt.h>
#include <jansson.h>
#include <stdlib.h>

static int sim_usage(FILE *f)
{
    fprintf(f, "usage: xdc simulate -t TOPOLOGY.yaml (-m MODEL.yaml | -c RUN.yaml) [--steps N] [--json]\n"
               "                    [--global-batch TOKENS] [--calibrate-compute SECONDS[,SECONDS...]]\n"
               "                    [--calibrate-ratio R] [--calibrate-p2p SECONDS] [--wan-gbps G] [--host-cores N]\n"
               "  Replay the planned schedule (with -c: the run file's mode, stages, microbatches, codec, bucket)\n"
               "  as a discrete-event model: 1F1B per replica, bucketed sync, WAN links with bandwidth and RTT.\n"
               "  --calibrate-compute  measured compute seconds per step of stage 0 (from a run's progress lines);\n"
               "                       scales every compute time; everything else stays predicted. A list, one\n"
               "                       value per stage (stage 0 first; as many as the plan's stages, which it pins),\n"
               "                       sets each stage's compute instead of deriving the others by FLOP ratio\n"
               "  --calibrate-ratio    with -c: WAN wire bytes per fp32 byte the run's codec measured (its summary's\n"
               "                       'WAN X MB sent for Y MB of fp32': X/Y) instead of the codec table's ratio\n"
               "  --calibrate-p2p      measured seconds of one in-region stage-to-stage transfer, from the receive\n"
               "                       being posted to the data being there (e.g. from a run's trace)\n"
               "  --wan-gbps           measured WAN goodput per link instead of the topology's bandwidth\n"
               "  --host-cores         every worker shares N cores (an emulated run on one machine)\n");
    return f == stdout ? XDC_EX_OK : XDC_EX_USAGE;
}

/* "S[,S...]": 1..cap positive seconds; 0 (the message in bad) otherwise. */
static int parse_seconds_list(const char *text, double *out, int cap, int *n, char *bad, size_t bad_cap)
{
    *n = 0;
    for (const char *p = text;; p++) {
        char *end = NULL;
        double v = strtod(p, &end);
        if (end == p || (*end && *end != ',') || !(v > 0 && v < 1e6)) {
            snprintf(bad, bad_cap, "'%s': each value must be a positive number of seconds", text);
            return 0;
        }
        if (*n == cap) {
            snprintf(bad, bad_cap, "'%s': at most %d values (one per stage)", text, cap);
            return 0;
        }
        out[(*n)++] = v;
        if (!*end) return 1;
        p = end;
    }
}

static void print_json(const plan_inputs *in, const xdc_plan *p, const xdc_sim_result *r, double wall)
{
    json_t *o = json_pack("{s:s, s:s, s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:I, s:f, s:f, s:f}", "topology",
                          in->topo->path, "mode", xdc_plan_mode_name(p->mode), "inner_steps", p->inner_steps, "gpus",
                          r->gpus, "steps", r->steps, "step_s", r->t_step, "compute_s", r->t_compute, "bubble_s",
                          r->t_bubble, "comm_exposed_s", r->t_comm_exposed, "utilisation", r->utilisation,
                          "wan_bytes_per_step", r->wan_bytes, "events", (json_int_t)r->events, "planner_step_s",
                          p->t_step, "compute_scale", in->opts.calib.compute_scale, "wall_s", wall);
    char *text = o ? json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    if (text) printf("%s\n", text);
    free(text);
    json_decref(o);
}

int xdc_cmd_simulate(int argc, char **argv)
{
    static const struct option opts[] = {{"topology", required_argument, NULL, 't'},
                                         {"model", required_argument, NULL, 'm'},
                                         {"run", required_argument, NULL, 'c'},
                                         {"steps", required_argument, NULL, 's'},
                                         {"json", no_argument, NULL, 'j'},
                                         {"global-batch", required_argument, NULL, 'g'},
                                         {"calibrate-compute", required_argument, NULL, 'C'},
                                         {"calibrate-ratio", required_argument, NULL, 'R'},
                                         {"calibrate-p2p", required_argument, NULL, 'P'},
                                         {"wan-gbps", required_argument, NULL, 'W'},
                                         {"host-cores", required_argument, NULL, 'H'},
                                         {"help", no_argument, NULL, 'h'},
                                         {0}};
    const char *topo = NULL, *model = NULL, *run = NULL;
    int json = 0, steps = 3, cores = 0, n_measured = 0, c;
    double global = 0, ratio = 0, p2p = 0, wan = 0;
    double measured[XDC_PLAN_MAX_STAGES]; /* (n_measured) seconds of compute per step, stage 0 first */
    optind = 1;
    while ((c = getopt_long(argc, argv, "t:m:c:s:jg:h", opts, NULL)) != -1) {
        char *end = NULL;
        const char *bad = NULL; /* the integer flag that failed */
        xdc_diag d;
        switch (c) {
        case 't': topo = optarg; break;
        case 'm': model = optarg; break;
        case 'c': run = optarg; break;
        case 's': bad = xdc_parse_int(optarg, 1, 100000, &steps, &d) != XDC_OK ? "--steps" : NULL; break;
        case 'j': json = 1; break;
        case 'g': global = strtod(optarg, &end); break;
        case 'C':
            if (!parse_seconds_list(optarg, measured, XDC_PLAN_MAX_STAGES, &n_measured, d.msg, sizeof d.msg))
                bad = "--calibrate-compute";
            break;
        case 'R': ratio = strtod(optarg, &end); break;
        case 'P': p2p = strtod(optarg, &end); break;
        case 'W': wan = strtod(optarg, &end); break;
        case 'H': bad = xdc_parse_int(optarg, 0, 1 << 20, &cores, &d) != XDC_OK ? "--host-cores" : NULL; break;
        case 'h': return sim_usage(stdout);
        default: return sim_usage(stderr);
        }
        if (bad) {
            fprintf(stderr, "xdc simulate: %s: %s\n", bad, d.msg);
            return XDC_EX_USAGE;
        }
        if (end && (*end || end == optarg)) {
            fprintf(stderr, "xdc simulate: bad number '%s'\n", optarg);
            return XDC_EX_USAGE;
        }
    }
    if (!topo || !model == !run || optind != argc) return sim_usage(stderr);
    if (steps < 1 || steps > 100000 || global < 0 || wan < 0 || cores < 0 || ratio < 0 || ratio > 2 ||
        !(p2p >= 0 && p2p <= 10)) {
        fprintf(stderr, "xdc simulate: --steps in 1..100000; --calibrate-ratio in 0..2; --calibrate-p2p in 0..10; "
                        "--global-batch, --wan-gbps, --host-cores >= 0\n");
        return XDC_EX_USAGE;
    }
    if (ratio > 0 && !run) {
        fprintf(stderr, "xdc simulate: --calibrate-ratio needs -c RUN.yaml (the run whose codec it measured)\n");
        return XDC_EX_USAGE;
    }
    plan_inputs in;
    int ex = plan_inputs_load(topo, model, run, global, &in);
    if (ex != XDC_EX_OK) return ex;
    if (n_measured > 1 && in.opts.stages > 0 && in.opts.stages != n_measured) {
        fprintf(stderr, "xdc simulate: --calibrate-compute has %d values, one per stage, but %s runs %d stages\n",
                n_measured, run, in.opts.stages);
        plan_inputs_free(&in);
        return XDC_EX_USAGE;
    }
    if (n_measured > 1) in.opts.stages = n_measured; /* one value per stage: the plan has that many */
    in.opts.calib.wan_gbps = wan;
    in.opts.calib.host_cores = cores;
    if (cores > 0) in.opts.calib.probe_cores = 0; /* the core queue shares the cores instead of the probe's share */
    in.opts.calib.wire_ratio = ratio;
    in.opts.calib.intra_p2p_s = p2p;
    snprintf(in.opts.calib.ratio_codec, sizeof in.opts.calib.ratio_codec, "%s", in.opts.codec);
    xdc_plan_set *set = NULL;
    ex = plan_inputs_search(&in, &set);
    if (ex == XDC_EX_OK && n_measured > 0) {
        /* Calibrate on the chosen structure, then plan again so the prediction uses the measured speed. The
         * stages and the microbatch size stay those the measurement was taken on. */
        xdc_err_t rc = xdc_plan_calibrate_compute(in.topo, &set->best, measured, n_measured, &in.opts.calib);
        in.opts.stages = set->best.stages;
        if (in.opts.micro_batch <= 0) in.opts.micro_batch = set->best.micro_batch;
        xdc_plan_set_destroy(set);
        set = NULL;
        if (rc == XDC_OK) {
            ex = plan_inputs_search(&in, &set);
        } else {
            fprintf(stderr, "xdc simulate: --calibrate-compute: the plan's stages predict no compute to scale\n");
            ex = XDC_EX_USAGE;
        }
    }
    if (ex == XDC_EX_OK) {
        xdc_sim_result r;
        xdc_diag d = {{0}};
        uint64_t t0 = xdc_now_ns();
        xdc_err_t rc = xdc_sim_run(in.topo, &in.shape, &set->best, &in.opts.calib, steps, &r, &d);
        double wall = (double)(xdc_now_ns() - t0) / 1e9;
        if (rc != XDC_OK) {
            fprintf(stderr, "xdc simulate: %s\n", d.msg[0] ? d.msg : xdc_strerror(rc));
            ex = XDC_EX_SOFTWARE;
        } else if (json) {
            print_json(&in, &set->best, &r, wall);
        } else {
            printf("simulate %s on %s: %d workers, %d steps, %lld events in %.3f s\n", in.model_path, in.topo->name,
                   r.gpus, r.steps, r.events, wall);
            plan_print(stdout, in.topo, &set->best);
            printf("  %s\n", in.compute);
            if (n_measured == 1)
                printf(
                    "  calibrated: compute times scaled x%.3f to match %.4f s of measured stage-0 compute per step\n",
                    in.opts.calib.compute_scale, measured[0]);
            for (int i = 0; i < n_measured && n_measured > 1; i++)
                printf("  calibrated: stage %d's compute set to the measured %.4f s per step (x%.3f its FLOPs' time)\n",
                       i, measured[i],
                       in.opts.calib.compute_scale *
                           (in.opts.calib.stage_scale[i] > 0 ? in.opts.calib.stage_scale[i] : 1));
            printf("simulated step %.4f s = compute %.4f + bubble %.4f + exposed comm %.4f; utilisation %.1f%%; "
                   "WAN %.3f MB/step\n",
                   r.t_step, r.t_compute, r.t_bubble, r.t_comm_exposed, 100 * r.utilisation, r.wan_bytes / 1e6);
            printf("sim_step_s=%.6f planner_step_s=%.6f\n", r.t_step, set->best.t_step);
        }
    }
    xdc_plan_set_destroy(set);
    plan_inputs_free(&in);
    return ex;
}
