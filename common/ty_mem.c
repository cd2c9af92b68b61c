/*
 * ty_mem.c - see ty_mem.h.
 */
#include "common/ty_mem.h"

#include <malloc.h>
#include <stdatomic.h>
#include <stdint.h>

#include "common/ty_time.h"

#define TRIM_INTERVAL_MS 1000

/* When the last trim began, in ms of the monotonic clock; far in the past at first. */
static _Atomic int64_t last_trim_ms = INT64_MIN / 2;

int ty_mem_trim(void)
{
    int64_t now = (int64_t)(ty_time_mono_ns() / 1000000u);
    int64_t last = atomic_load(&last_trim_ms);
    /* The exchange elects one caller when several threads come within the same second. */
    if (now - last < TRIM_INTERVAL_MS || !atomic_compare_exchange_strong(&last_trim_ms, &last, now))
        return 0;
    malloc_trim(0);
    return 1;
}
