# Unit tests of scheduler/: the local backend runs real processes (sh, sleep, env).
ty_unit_test(test_local ${CMAKE_CURRENT_LIST_DIR}/test_local.c ty_scheduler)
# The pump and the reader of ranks' logs: pipes, rotation, tail, follow.
ty_unit_test(test_ranklog ${CMAKE_CURRENT_LIST_DIR}/test_ranklog.c ty_scheduler)
