/*
 * timeutil.h - monotonic clock helpers.
 */
#ifndef INFERD_BASE_TIMEUTIL_H
#define INFERD_BASE_TIMEUTIL_H

#include <stdint.h>
#include <time.h>

static inline uint64_t time_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline double time_now_s(void)
{
    return (double)time_now_ns() * 1e-9;
}

#endif
