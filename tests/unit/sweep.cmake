# api/sweep_*.c: the search space of a sweep (expansion, seeded draws, placeholders).
ty_unit_test(test_sweep_space ${CMAKE_CURRENT_LIST_DIR}/test_sweep_space.c ty_api)
ty_unit_test(test_sweep_spec ${CMAKE_CURRENT_LIST_DIR}/test_sweep_spec.c ty_api)
