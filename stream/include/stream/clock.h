/* The monotonic clock both daemons read for timeouts, liveness and latency figures. */
#ifndef STREAM_CLOCK_H
#define STREAM_CLOCK_H

#include <stdint.h>

/* st_now_ms() / st_now_us() - CLOCK_MONOTONIC in milliseconds / microseconds. Not for pure
 * code (stream/src): it takes times as arguments. */
uint64_t st_now_ms(void);
uint64_t st_now_us(void);

#endif
