/*
 * test_paths.c - creating the database's directory.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "server/paths.h"

static void test_make_parent_dir(void **state)
{
    (void)state;
    char base[64], file[160], dir1[128], dir2[160], err[256];
    struct stat sb;
    snprintf(base, sizeof base, "/tmp/ty_test_paths_XXXXXX");
    assert_non_null(mkdtemp(base));
    snprintf(dir1, sizeof dir1, "%s/a", base);
    snprintf(dir2, sizeof dir2, "%s/a/b", base);
    snprintf(file, sizeof file, "%s/a/b/t.db", base);

    assert_int_equal(paths_make_parent_dir(file, err, sizeof err), TY_OK);
    assert_int_equal(stat(dir2, &sb), 0);
    assert_true(S_ISDIR(sb.st_mode));
    assert_int_equal(sb.st_mode & 0777, 0700);
    /* Existing directories are fine. */
    assert_int_equal(paths_make_parent_dir(file, err, sizeof err), TY_OK);
    /* A bare name and a file in / need nothing. */
    assert_int_equal(paths_make_parent_dir("t.db", err, sizeof err), TY_OK);
    assert_int_equal(paths_make_parent_dir("/t.db", err, sizeof err), TY_OK);

    /* A regular file in the way is an error naming it. */
    char blocker[160], below[200];
    snprintf(blocker, sizeof blocker, "%s/a/file", base);
    FILE *fp = fopen(blocker, "w");
    assert_non_null(fp);
    fclose(fp);
    snprintf(below, sizeof below, "%s/x/t.db", blocker);
    assert_int_equal(paths_make_parent_dir(below, err, sizeof err), TY_EIO);
    assert_non_null(strstr(err, blocker));

    unlink(blocker);
    rmdir(dir2);
    rmdir(dir1);
    rmdir(base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_make_parent_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
