# The reconcile loop, with a real store and the real local backend, or the fake backend
# (tests/support/fake_backend.h) and the store's fault injection.
ty_unit_test(test_sched ${CMAKE_CURRENT_LIST_DIR}/test_sched.c ty_scheduler ty_fake_backend)
