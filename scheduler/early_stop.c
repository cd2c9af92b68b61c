/*
 * early_stop.c - median early stopping's rule (see early_stop.h).
 *
 * The verdict and the sentence are made from the same median and count, so what the event says
 * is exactly what the rule saw.
 */
#include "scheduler/early_stop.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Writes the sentence into out->message; a truncated one stays terminated, a failed one is
 * empty, which is all a message needs. */
__attribute__((format(printf, 2, 3))) static void say(early_stop_result *out, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out->message, sizeof out->message, fmt, ap);
    va_end(ap);
    if (n < 0)
        out->message[0] = '\0';
}

void early_stop_decide(const early_stop_input *in, early_stop_result *out)
{
    if (!out)
        return;
    *out = (early_stop_result){.verdict = EARLY_STOP_TOO_FEW};
    if (!in || (in->ndone > 0 && !in->done)) {
        say(out, "no input to judge");
        return;
    }
    const char *metric = in->metric ? in->metric : "objective";
    if (in->step < in->min_step) {
        out->verdict = EARLY_STOP_TOO_EARLY;
        say(out, "%s at step %lld is not judged before step %lld", metric, (long long)in->step,
            (long long)in->min_step);
        return;
    }
    size_t need = in->min_trials > 1 ? (size_t)in->min_trials : 1;
    size_t n = in->ndone;
    if (n < need) {
        say(out, "%zu succeeded trial%s with %s at or before step %lld, %zu needed", n,
            n == 1 ? "" : "s", metric, (long long)in->step, need);
        return;
    }
    qsort(in->done, n, sizeof *in->done, cmp_double);
    double median = n % 2 ? in->done[n / 2] : (in->done[n / 2 - 1] + in->done[n / 2]) / 2;
    int worse = in->maximize ? in->value < median : in->value > median;
    out->verdict = worse ? EARLY_STOP_STOP : EARLY_STOP_GO_ON;
    out->median = median;
    say(out, "%s %.6g at step %lld is %s than the median %.6g of %zu succeeded trials", metric,
        in->value, (long long)in->step, worse ? "worse" : "no worse", median, n);
}
