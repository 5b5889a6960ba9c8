/* test_intra_ranks.h — forks the ranks of one intra communicator for a test: rank 0 makes the
 * bootstrap id and passes it to the others through a pipe (as the rendezvous would), every rank runs
 * the same function, and the parent asserts each rank's verdict. Ranks report through a shared page;
 * RCHECK/RCHECK_OK record the first failure and return from the rank function. */
#ifndef XDC_TEST_INTRA_RANKS_H
#define XDC_TEST_INTRA_RANKS_H

#include "tests/xdc_test.h"

#include "intra/xdc_intra.h"

#define INTRA_TEST_MAX_RANKS 8

typedef struct intra_test_rank {
    xdc_intra_backend backend;
    int rank, size;
    int status;         /* -1 running, 0 passed, 1 failed */
    int release_fd;     /* read end of the pipe finished ranks write one byte to */
    xdc_intra_req *req; /* the request intra_test_run_op waits for */
    xdc_diag diag;      /* detail of the last failed wait */
    char msg[640];      /* failure message */
    char note[512];     /* free text a rank reports to the test */
} intra_test_rank;

typedef struct intra_test_result {
    char note[INTRA_TEST_MAX_RANKS][512];
} intra_test_result;

typedef int (*intra_test_rank_fn)(xdc_intra_comm *comm, intra_test_rank *tr, const void *arg);

/* Communicator settings of a run (NULL: the defaults below). */
typedef struct intra_test_opts {
    int nccl_semantics;            /* xdc_intra_config.nccl_semantics */
    int64_t op_timeout_ms;         /* 0: 20 s */
    const xdc_device_ops *dev_ops; /* xdc_intra_config.dev_ops */
} intra_test_opts;

/* Fork `n` ranks running fn; assert every rank passed (a rank killed by SIGKILL from fn counts as
 * passed: the fault tests do that on purpose). Notes are copied to *res when res is not NULL. */
void intra_test_ranks(xdc_intra_backend backend, int n, intra_test_rank_fn fn, const void *arg, intra_test_result *res);
/* The same with communicator settings. */
void intra_test_ranks_opts(xdc_intra_backend backend, int n, intra_test_rank_fn fn, const void *arg,
                           intra_test_result *res, const intra_test_opts *opts);
/* Wait for tr->req when `started` is XDC_OK (the result of the call that started it), 20 s at most. */
xdc_err_t intra_test_run_op(intra_test_rank *tr, xdc_err_t started);
/* A rank that must stay alive but absent: block until every other rank has finished. Returns 0. */
int intra_test_block_until_released(intra_test_rank *tr);
/* CUDA devices NCCL could use, asked in a child so this process never initialises CUDA before fork;
 * 0 with the reason in why when none. */
int intra_test_gpu_count(char *why, size_t cap);

#define RCHECK(cond, tr, ...)                                  \
    do {                                                       \
        if (!(cond)) {                                         \
            snprintf((tr)->msg, sizeof(tr)->msg, __VA_ARGS__); \
            return -1;                                         \
        }                                                      \
    } while (0)

#define RCHECK_OK(call, tr)                                                                                          \
    do {                                                                                                             \
        xdc_err_t rc_ = (call);                                                                                      \
        if (rc_ != XDC_OK) {                                                                                         \
            snprintf((tr)->msg, sizeof(tr)->msg, "%s:%d: %s -> %s: %s", __FILE__, __LINE__, #call, xdc_errname(rc_), \
                     (tr)->diag.msg);                                                                                \
            return -1;                                                                                               \
        }                                                                                                            \
    } while (0)

#endif /* XDC_TEST_INTRA_RANKS_H */
