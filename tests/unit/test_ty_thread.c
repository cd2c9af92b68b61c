/*
 * Unit tests for common/ty_thread.c: a thread's name as `ps -L` and /proc show it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>

#include "common/ty_thread.h"

static void *named(void *arg)
{
    char *got = arg;
    ty_thread_name("ty-kube-informer-pods");
    prctl(PR_GET_NAME, got, 0, 0, 0);
    return NULL;
}

/* The name is the thread's own, cut to the kernel's 15 characters. */
static void test_names_the_calling_thread(void **state)
{
    (void)state;
    char got[17] = "", mine[17] = "";
    pthread_t t;
    prctl(PR_GET_NAME, mine, 0, 0, 0);
    assert_int_equal(pthread_create(&t, NULL, named, got), 0);
    pthread_join(t, NULL);
    assert_string_equal(got, "ty-kube-informe");
    char after[17] = "";
    prctl(PR_GET_NAME, after, 0, 0, 0);
    assert_string_equal(after, mine);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_the_calling_thread),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
