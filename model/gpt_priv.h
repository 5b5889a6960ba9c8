/* gpt_internal.h — private layout of a GPT pipeline stage (xdc_gpt.h): typed views into the parameter,
 * gradient and activation arenas, shared by gpt_stage.c (layout, init, state), gpt_pass.c (forward and
 * backward) and gpt_optim.c (AdamW). */
#ifndef XDC_GPT_INTERNAL_H
#define XDC_GPT_INTERNAL_H

#include "model/xdc_gpt.h"
#include "kernels/xdc_device.h"
#include "kernels/xdc_model_ops.h"

#define GPT_LAYER_TENSORS 12

/* One block's parameters (or gradients), contiguous in the arena in this order. */
typedef struct gpt_layer_params {
    float *ln1w;     /* (C) */
    float *ln1b;     /* (C) */
    float *qkvw;     /* (3C, C) */
    float *qkvb;     /* (3C) */
    float *attprojw; /* (C, C) */
    float *attprojb; /* (C) */
    float *ln2w;     /* (C) */
    float *ln2b;     /* (C) */
    float *fcw;      /* (4C, C) */
    float *fcb;      /* (4C) */
    float *fcprojw;  /* (C, 4C) */
    float *fcprojb;  /* (C) */
} gpt_layer_params;

/* A stage's parameters (or gradients); NULL where the stage does not own the tensor. */
typedef struct gpt_params {
    float *wte;               /* (V, C)    first stage */
    float *wpe;               /* (maxT, C) first stage */
    gpt_layer_params *layers; /* (nl) blocks layer_begin..layer_end-1 */
    float *lnfw;              /* (C)       last stage */
    float *lnfb;              /* (C)       last stage */
    float *lm_head;           /* (V, C)    last stage */
} gpt_params;

/* What one tensor is, for init and weight decay. */
typedef struct gpt_tensor {
    size_t offset, count; /* floats into the arena */
    int global_index;     /* position in the unsplit model's tensor list: picks its RNG stream */
    float init_std;       /* > 0: normal(0, std); else constant init_value */
    float init_value;
    bool decay;
} gpt_tensor;

/* One block's activations for one microbatch (N = B*T). */
typedef struct gpt_layer_acts {
    float *ln1;      /* (N, C) */
    float *ln1_mean; /* (N) */
    float *ln1_rstd; /* (N) */
    float *qkv;      /* (N, 3C) */
    float *atty;     /* (N, C) attention output before the projection */
    float *att;      /* (B, NH, T, T) softmax probabilities */
    float *res2;     /* (N, C) residual after attention */
    float *ln2;      /* (N, C) */
    float *ln2_mean; /* (N) */
    float *ln2_rstd; /* (N) */
    float *fch;      /* (N, 4C) MLP pre-activation */
    float *fch_gelu; /* (N, 4C) */
    float *res3;     /* (N, C) block output */
} gpt_layer_acts;

/* Everything forward(slot) keeps for backward(slot). */
typedef struct gpt_slot {
    void *arena;
    int32_t *tokens;        /* (N) first stage */
    int32_t *targets;       /* (N) last stage */
    float *x_in;            /* (N, C) stage input: the encoder output on the first stage */
    gpt_layer_acts *layers; /* (nl) */
    float *lnf;             /* (N, C)  last stage */
    float *lnf_mean;        /* (N)     last stage */
    float *lnf_rstd;        /* (N)     last stage */
    float *probs;           /* (N, V)  last stage */
    float *losses;          /* (N)     last stage */
    bool forwarded;         /* forward ran and backward has not yet consumed it */
} gpt_slot;

/* Scratch shared by all slots: one backward runs at a time. */
typedef struct gpt_scratch {
    void *arena;
    float *proj;      /* (N, C) projection output before the residual add */
    float *logits;    /* (N, V) logits in forward, dlogits in backward */
    float *dres;      /* (N, C) gradient of the residual stream */
    float *dln;       /* (N, C) gradient of a layernorm output */
    float *datty;     /* (N, C) */
    float *dqkv;      /* (N, 3C) */
    float *datt;      /* (B, NH, T, T) */
    float *dfch;      /* (N, 4C) */
    float *dfch_gelu; /* (N, 4C) */
} gpt_scratch;

struct xdc_gpt_stage {
    const xdc_kern_backend *be;
    const xdc_model_ops *ops;  /* be->model: the layers, queued on the current stream */
    const xdc_device_ops *dev; /* be->device: every allocation, copy, zeroing and wait */
    xdc_stream *stream;        /* the stage's compute stream: current while a stage call runs */
    xdc_gpt_stage_config cfg;
    int nl; /* layers owned */
    bool first, last;
    size_t num_params;
    float *param_arena; /* (num_params) backend */
    float *grad_arena;  /* (num_params) backend: the current gradients (grads views into it) */
    float *grad_spare;  /* (num_params) backend: grad_buffers 2's other arena (xdc_gpt_stage_swap_grads), or NULL */
    float *m_arena;     /* (num_params) backend: AdamW first moment */
    float *v_arena;     /* (num_params) backend: AdamW second moment */
    float *host_stage;  /* (num_params) pinned host staging for init, hashing, the loss and state transfer */
    gpt_params params, grads;
    gpt_tensor *tensors; /* (n_tensors) */
    int n_tensors;
    gpt_slot *slots; /* (max_inflight) */
    gpt_scratch scratch;
    size_t slot_bytes, scratch_bytes; /* one slot's arena, the scratch arena */
    int slots_in_use;                 /* slots holding a forwarded microbatch not yet backwarded */
    int slots_peak;                   /* the most slots_in_use has been: the activation high-water mark */
    int64_t adam_t;                   /* optimizer steps taken */
    /* Armed for one backward: called as gradients [from, num_params) become final. */
    xdc_gpt_grad_ready_fn ready_fn;
    void *ready_ctx;
};

/* Every public stage call runs its ops on the stage's stream: gpt_enter makes it the calling thread's
 * current stream and returns the caller's, which gpt_leave restores. */
static inline xdc_stream *gpt_enter(const xdc_gpt_stage *s)
{
    xdc_stream *prev = NULL;
    if (s->dev->get_stream(&prev) != XDC_OK) prev = NULL; /* NULL restores the main stream */
    (void)s->dev->set_stream(s->stream);
    return prev;
}
static inline void gpt_leave(const xdc_gpt_stage *s, xdc_stream *prev) { (void)s->dev->set_stream(prev); }

#endif /* XDC_GPT_INTERNAL_H */
