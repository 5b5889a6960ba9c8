/* xdc_model_config.h — the model + training config file (examples/models/NAME.yaml): a `model:` mapping
 * (layers, heads, width, context, vocab) and a `train:` mapping (batch, schedule, optimizer, seed,
 * evaluation). Loaded with the table-driven YAML loader; unknown keys, wrong types, out-of-range values
 * and inconsistent shapes are errors naming file:line:col. docs/model.md lists every key. */
#ifndef XDC_MODEL_CONFIG_H
#define XDC_MODEL_CONFIG_H

#include "model/xdc_gpt.h"
#include "config/xdc_config.h"

#include <stdint.h>

typedef struct xdc_train_config {
    xdc_gpt_config model;
    int batch_size;   /* sequences per microbatch */
    int seq_len;      /* tokens per sequence (<= context) */
    int microbatches; /* accumulated per optimizer step */
    int steps;        /* optimizer steps; also the schedule's horizon */
    int warmup_steps;
    double lr, min_lr_frac;
    double weight_decay, grad_clip;
    double beta1, beta2, eps;
    int64_t seed;
    double val_fraction;
    int eval_interval; /* steps between validation passes (0: only at the end) */
    int eval_batches;  /* validation batches per pass */
    int log_interval;  /* steps between progress lines */
} xdc_train_config;

/* Defaults used for keys the file leaves out. */
void xdc_train_config_defaults(xdc_train_config *c);
/* XDC_ERR_CONFIG with every problem in `errs`. */
xdc_err_t xdc_model_config_load(const char *path, xdc_train_config *out, xdc_cfg_errors *errs);

#endif /* XDC_MODEL_CONFIG_H */
