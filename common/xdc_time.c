/* xdc_time.c — clocks, deadlines and duration parsing. */
#include "common/xdc_time.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

uint64_t xdc_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t xdc_wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t xdc_deadline_ms(int64_t timeout_ms)
{
    if (timeout_ms < 0) return XDC_DEADLINE_NEVER;
    return xdc_now_ns() + (uint64_t)timeout_ms * XDC_NS_PER_MS;
}

int xdc_deadline_poll_ms(uint64_t deadline)
{
    if (deadline == XDC_DEADLINE_NEVER) return INT_MAX / 2;
    uint64_t now = xdc_now_ns();
    if (now >= deadline) return 0;
    uint64_t ms = (deadline - now + XDC_NS_PER_MS - 1) / XDC_NS_PER_MS;
    return ms > INT_MAX / 2 ? INT_MAX / 2 : (int)ms;
}

int xdc_deadline_passed(uint64_t deadline) { return deadline != XDC_DEADLINE_NEVER && xdc_now_ns() >= deadline; }

void xdc_sleep_s(double seconds)
{
    if (seconds <= 0) return;
    struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) continue; /* a signal: sleep the rest */
}

int xdc_parse_duration_ms(const char *text, int64_t *out_ms)
{
    if (!text || !*text) return -1;
    char *end;
    double v = strtod(text, &end);
    if (end == text || v < 0 || v > 1e12) return -1;
    double scale;
    if (*end == '\0' || strcmp(end, "s") == 0) scale = 1000.0;
    else if (strcmp(end, "ms") == 0) scale = 1.0;
    else if (strcmp(end, "us") == 0) scale = 0.001;
    else if (strcmp(end, "m") == 0 || strcmp(end, "min") == 0) scale = 60000.0;
    else if (strcmp(end, "h") == 0) scale = 3600000.0;
    else return -1;
    *out_ms = (int64_t)(v * scale + 0.5);
    return 0;
}
