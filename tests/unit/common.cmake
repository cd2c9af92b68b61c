ty_unit_test(test_ty_buf ${CMAKE_CURRENT_LIST_DIR}/test_ty_buf.c ty_common)
ty_unit_test(test_ty_time ${CMAKE_CURRENT_LIST_DIR}/test_ty_time.c ty_common)
ty_unit_test(test_job_state ${CMAKE_CURRENT_LIST_DIR}/test_job_state.c ty_job_state)
ty_unit_test(test_ty_json ${CMAKE_CURRENT_LIST_DIR}/test_ty_json.c ty_common)
