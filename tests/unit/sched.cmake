# The reconcile loop, with a real store and the real local backend.
ty_unit_test(test_sched ${CMAKE_CURRENT_LIST_DIR}/test_sched.c ty_scheduler)
