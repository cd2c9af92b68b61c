# store/store_metrics.c and the job tokens (store_tokens.c, written by store_sched.c).
ty_unit_test(test_store_metrics ${CMAKE_CURRENT_LIST_DIR}/test_store_metrics.c ty_store)
target_link_libraries(test_store_metrics PRIVATE m)
