# api/ui.c: the web page's files, served with their types and the Content-Security-Policy.
ty_unit_test(test_api_ui ${CMAKE_CURRENT_LIST_DIR}/test_api_ui.c ty_api ty_test_support)
target_sources(test_api_ui PRIVATE ${CMAKE_CURRENT_LIST_DIR}/test_api_fixture.c)
