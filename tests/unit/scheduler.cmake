# Unit tests of scheduler/: the local backend runs real processes (sh, sleep, env).
ty_unit_test(test_local ${CMAKE_CURRENT_LIST_DIR}/test_local.c ty_scheduler)
