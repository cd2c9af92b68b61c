# Unit tests of store/: one cmocka file per source file.
ty_unit_test(test_store ${CMAKE_CURRENT_LIST_DIR}/test_store.c ty_store)
ty_unit_test(test_store_schema ${CMAKE_CURRENT_LIST_DIR}/test_store_schema.c ty_store)
ty_unit_test(test_store_id ${CMAKE_CURRENT_LIST_DIR}/test_store_id.c ty_store)
ty_unit_test(test_store_jobs ${CMAKE_CURRENT_LIST_DIR}/test_store_jobs.c ty_store)
ty_unit_test(test_store_list ${CMAKE_CURRENT_LIST_DIR}/test_store_list.c ty_store)
ty_unit_test(test_store_tokens ${CMAKE_CURRENT_LIST_DIR}/test_store_tokens.c ty_store)
ty_unit_test(test_store_teams ${CMAKE_CURRENT_LIST_DIR}/test_store_teams.c ty_store)
ty_unit_test(test_store_sched ${CMAKE_CURRENT_LIST_DIR}/test_store_sched.c ty_store)
