/* xdc_model_config.c — loads the model + training YAML (xdc_model_config.h) through field tables, one
 * row per key, then checks the rules that span keys (width % heads, seq_len <= context). */
#include "model/xdc_model_config.h"

#include <stddef.h>

#define TF(key, type, member, lo, hi)                                         \
    {                                                                         \
        key, type, offsetof(xdc_train_config, member), 0, false, lo, hi, NULL \
    }

typedef struct root_nodes {
    const xdc_cfg_node *model, *train;
} root_nodes;

static const xdc_cfg_field root_fields[] = {
    {"model", XDC_CFG_NODE, offsetof(root_nodes, model), 0, true, 0, 0, NULL},
    {"train", XDC_CFG_NODE, offsetof(root_nodes, train), 0, true, 0, 0, NULL},
};

static const xdc_cfg_field model_fields[] = {
    {"layers", XDC_CFG_INT, offsetof(xdc_gpt_config, n_layer), 0, true, 1, 256, NULL},
    {"heads", XDC_CFG_INT, offsetof(xdc_gpt_config, n_head), 0, true, 1, 256, NULL},
    {"width", XDC_CFG_INT, offsetof(xdc_gpt_config, n_embd), 0, true, 1, 65536, NULL},
    {"context", XDC_CFG_INT, offsetof(xdc_gpt_config, max_seq_len), 0, true, 1, 65536, NULL},
    {"vocab", XDC_CFG_INT, offsetof(xdc_gpt_config, vocab_size), 0, false, 2, 65536, NULL},
};

static const xdc_cfg_field train_fields[] = {
    TF("batch_size", XDC_CFG_INT, batch_size, 1, 65536),
    TF("seq_len", XDC_CFG_INT, seq_len, 1, 65536),
    TF("microbatches", XDC_CFG_INT, microbatches, 1, 4096),
    TF("steps", XDC_CFG_INT, steps, 1, 1e9),
    TF("warmup_steps", XDC_CFG_INT, warmup_steps, 0, 1e9),
    TF("lr", XDC_CFG_DOUBLE, lr, 1e-9, 10),
    TF("min_lr_frac", XDC_CFG_DOUBLE, min_lr_frac, 0, 1),
    TF("weight_decay", XDC_CFG_DOUBLE, weight_decay, 0, 10),
    TF("grad_clip", XDC_CFG_DOUBLE, grad_clip, 0, 1e9),
    TF("beta1", XDC_CFG_DOUBLE, beta1, 0, 0.999999),
    TF("beta2", XDC_CFG_DOUBLE, beta2, 0, 0.999999),
    TF("eps", XDC_CFG_DOUBLE, eps, 1e-20, 1),
    TF("seed", XDC_CFG_INT64, seed, 0, 9.0e15),
    TF("val_fraction", XDC_CFG_DOUBLE, val_fraction, 1e-6, 0.9),
    TF("eval_interval", XDC_CFG_INT, eval_interval, 0, 1e9),
    TF("eval_batches", XDC_CFG_INT, eval_batches, 1, 1e6),
    TF("log_interval", XDC_CFG_INT, log_interval, 1, 1e9),
};

void xdc_train_config_defaults(xdc_train_config *c)
{
    *c = (xdc_train_config){
        .model = {.n_layer = 2, .n_head = 4, .n_embd = 64, .max_seq_len = 64, .vocab_size = 256},
        .batch_size = 16,
        .seq_len = 64,
        .microbatches = 1,
        .steps = 300,
        .warmup_steps = 20,
        .lr = 3e-3,
        .min_lr_frac = 0.1,
        .weight_decay = 0.1,
        .grad_clip = 1.0,
        .beta1 = 0.9,
        .beta2 = 0.95,
        .eps = 1e-8,
        .seed = 1337,
        .val_fraction = 0.1,
        .eval_interval = 100,
        .eval_batches = 8,
        .log_interval = 10,
    };
}

xdc_err_t xdc_model_config_load(const char *path, xdc_train_config *out, xdc_cfg_errors *errs)
{
    xdc_train_config c;
    xdc_train_config_defaults(&c);
    xdc_cfg_doc *doc = NULL;
    /* Errors found here are this file's, whatever file the caller set `errs` up for (the run file or
     * the topology that named this model file). */
    xdc_cfg_errors_init(errs, path);
    XDC_CHECK(xdc_cfg_load_file(path, &doc, errs));
    root_nodes root = {0};
    int bad = xdc_cfg_map_fields(xdc_cfg_root(doc), root_fields, 2, &root, errs);
    if (root.model)
        bad += xdc_cfg_map_fields(root.model, model_fields, sizeof model_fields / sizeof model_fields[0], &c.model,
                                  errs);
    if (root.train)
        bad += xdc_cfg_map_fields(root.train, train_fields, sizeof train_fields / sizeof train_fields[0], &c, errs);
    if (bad == 0 && c.model.n_embd % c.model.n_head != 0) {
        xdc_cfg_error_at(errs, root.model, "width (%d) must be a multiple of heads (%d)", c.model.n_embd,
                         c.model.n_head);
        bad++;
    }
    if (bad == 0 && c.seq_len > c.model.max_seq_len) {
        xdc_cfg_error_at(errs, root.train, "seq_len (%d) exceeds the model context (%d)", c.seq_len,
                         c.model.max_seq_len);
        bad++;
    }
    if (bad == 0 && c.warmup_steps > c.steps) {
        xdc_cfg_error_at(errs, root.train, "warmup_steps (%d) exceeds steps (%d)", c.warmup_steps, c.steps);
        bad++;
    }
    xdc_cfg_destroy(doc);
    if (bad) return XDC_ERR_CONFIG;
    *out = c;
    return XDC_OK;
}
