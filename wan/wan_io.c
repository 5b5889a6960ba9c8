/* wan_io.c — the generic part of the WAN I/O layer stack (wan_io.h): pushing layers, finding one by
 * kind, recording the first failure, and closing a connection from the top layer down. */
#include "wan/wan_io.h"

#include <stdarg.h>
#include <stdio.h>

void wan_io_stack_init(wan_io_stack *stk)
{
    stk->top = NULL;
    stk->fd = -1;
    stk->want = stk->hold = 0;
    stk->retry_ns = 0;
    stk->err = XDC_OK;
    stk->why[0] = 0;
}

int wan_io_fail(wan_io_stack *stk, xdc_err_t err, const char *fmt, ...)
{
    if (stk->err != XDC_OK) return WAN_IO_FAILED;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(stk->why, sizeof stk->why, fmt, ap);
    va_end(ap);
    stk->err = err;
    return WAN_IO_FAILED;
}

void wan_io_push(wan_io_stack *stk, wan_io *io, const wan_io_ops *ops)
{
    io->ops = ops;
    io->lower = stk->top;
    io->stk = stk;
    stk->top = io;
}

wan_io *wan_io_find(const wan_io_stack *stk, const wan_io_ops *ops)
{
    for (wan_io *io = stk->top; io; io = io->lower)
        if (io->ops == ops) return io;
    return NULL;
}

void wan_io_stack_close(wan_io_stack *stk, int abortive)
{
    if (stk->top) stk->top->ops->shutdown(stk->top, abortive);
    for (wan_io *io = stk->top, *lower; io; io = lower) {
        lower = io->lower;
        io->ops->close(io);
    }
    wan_io_stack_init(stk);
}
