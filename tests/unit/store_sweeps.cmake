# store/store_sweeps.c: sweeps, their trial jobs, objective values and cancel.
ty_unit_test(test_store_sweeps ${CMAKE_CURRENT_LIST_DIR}/test_store_sweeps.c ty_store)
