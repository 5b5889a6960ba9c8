/* xdc_time.h — monotonic and wall clocks in nanoseconds, and deadlines built on the monotonic one. */
#ifndef XDC_TIME_H
#define XDC_TIME_H

#include <stdint.h>

/* CLOCK_MONOTONIC in ns: for durations and deadlines. */
uint64_t xdc_now_ns(void);
/* CLOCK_REALTIME in ns: for log timestamps and trace epochs only. */
uint64_t xdc_wall_ns(void);

/* A deadline `timeout_ms` from now; timeout_ms < 0 means never. */
uint64_t xdc_deadline_ms(int64_t timeout_ms);
/* Milliseconds left until `deadline` (0 when passed, INT32_MAX-ish when infinite), for poll(2). */
int xdc_deadline_poll_ms(uint64_t deadline);
int xdc_deadline_passed(uint64_t deadline);
/* Sleep `seconds` (<= 0: return at once), the whole of it even when signals interrupt the sleep. */
void xdc_sleep_s(double seconds);

/* Parse a duration such as "250ms", "30s", "2m", "1.5s" or a bare number of seconds into ms.
 * Returns 0 on success, -1 when the text is not a duration. */
int xdc_parse_duration_ms(const char *text, int64_t *out_ms);

#define XDC_NS_PER_MS      UINT64_C(1000000)
#define XDC_DEADLINE_NEVER UINT64_MAX

#endif /* XDC_TIME_H */
