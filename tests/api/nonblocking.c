/* nonblocking.c — a libxdc program for the suite (tests/e2e/test_api.c builds it against the installed
 * library): two regions of one member each, and a FIFO that orders them without any sleep.
 *
 *   nonblocking FIFO COUNT
 *
 * Region 0 posts xdc_iallreduce, and while region 1 is still blocked opening the FIFO (so it has posted
 * nothing) waits 50 ms: XDC_STATUS_TIMEOUT, and xdc_request_test says XDC_STATUS_IN_PROGRESS. Then it
 * writes one byte into the FIFO; region 1, released, posts its half, and both wait without a deadline.
 * Prints "nonblocking: region R: timeout then complete, mean ok" and exits 0, or names what went wrong
 * and exits 1. */
#include <xdc.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int fail(xdc_comm *c, const char *what, int st)
{
    fprintf(stderr, "nonblocking: %s: %s: %s\n", what, xdc_status_string(st), c ? xdc_comm_last_error(c) : "");
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: nonblocking FIFO COUNT\n");
        return 64;
    }
    size_t count = strtoul(argv[2], NULL, 10);
    char err[1024];
    xdc_comm *c;
    int st = xdc_comm_create(NULL, &c, err, sizeof err);
    if (st != XDC_SUCCESS) {
        fprintf(stderr, "nonblocking: create: %s: %s\n", xdc_status_string(st), err);
        return 1;
    }
    int region = xdc_comm_region(c);
    float *buf = malloc(count * sizeof *buf); /* (count) fp32: 2 in region 0, 6 in region 1 */
    for (size_t i = 0; i < count; i++) buf[i] = region == 0 ? 2.0f : 6.0f;
    xdc_request *req;
    char byte = 1;
    if (region == 0) {
        if ((st = xdc_iallreduce(c, 7, buf, count, &req)) != XDC_SUCCESS) return fail(c, "iallreduce", st);
        if ((st = xdc_request_wait(req, 50)) != XDC_STATUS_TIMEOUT) return fail(c, "wait 50 ms (want a timeout)", st);
        printf("nonblocking: region 0: wait with 50 ms: %s (%s)\n", xdc_status_string(st), xdc_comm_last_error(c));
        if ((st = xdc_request_test(req)) != XDC_STATUS_IN_PROGRESS) return fail(c, "test (want in progress)", st);
        int fd = open(argv[1], O_WRONLY); /* region 1 opens it for reading: both go on */
        if (fd < 0 || write(fd, &byte, 1) != 1) return fail(c, "FIFO write", XDC_STATUS_IO);
        close(fd);
    } else {
        int fd = open(argv[1], O_RDONLY);
        if (fd < 0 || read(fd, &byte, 1) != 1) return fail(c, "FIFO read", XDC_STATUS_IO);
        close(fd);
        if ((st = xdc_iallreduce(c, 7, buf, count, &req)) != XDC_SUCCESS) return fail(c, "iallreduce", st);
    }
    if ((st = xdc_request_wait(req, -1)) != XDC_SUCCESS) return fail(c, "wait", st);
    if ((st = xdc_request_wait(req, -1)) != XDC_STATUS_INVALID) return fail(c, "second wait (want invalid)", st);
    for (size_t i = 0; i < count; i++)
        if (buf[i] != 4.0f) {
            fprintf(stderr, "nonblocking: value %zu is %g, not the mean 4\n", i, buf[i]);
            return 1;
        }
    if ((st = xdc_comm_finalize(c)) != XDC_SUCCESS) return fail(c, "finalize", st);
    printf("nonblocking: region %d: timeout then complete, mean ok\n", region);
    xdc_comm_destroy(c);
    free(buf);
    return 0;
}
