/*
 * ty_thread.c - see ty_thread.h.
 */
#include "common/ty_thread.h"

#include <stdio.h>
#include <sys/prctl.h>

void ty_thread_name(const char *name)
{
    char cut[16];
    snprintf(cut, sizeof cut, "%s", name ? name : "");
    (void)prctl(PR_SET_NAME, cut, 0, 0, 0);
}
