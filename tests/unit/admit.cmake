# The admission policy (scheduler/admit.c) alone: table tests and seeded invariants.
ty_unit_test(test_admit ${CMAKE_CURRENT_LIST_DIR}/test_admit.c ty_admit)
