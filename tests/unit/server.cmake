# Unit tests of server/ (one file per module).
ty_unit_test(test_router ${CMAKE_CURRENT_LIST_DIR}/test_router.c ty_server)
ty_unit_test(test_config ${CMAKE_CURRENT_LIST_DIR}/test_config.c ty_server)
ty_unit_test(test_auth ${CMAKE_CURRENT_LIST_DIR}/test_auth.c ty_server)
ty_unit_test(test_http ${CMAKE_CURRENT_LIST_DIR}/test_http.c ty_server)
ty_unit_test(test_token_cli ${CMAKE_CURRENT_LIST_DIR}/test_token_cli.c ty_server)
ty_unit_test(test_paths ${CMAKE_CURRENT_LIST_DIR}/test_paths.c ty_server)
ty_unit_test(test_reqlog ${CMAKE_CURRENT_LIST_DIR}/test_reqlog.c ty_server)
