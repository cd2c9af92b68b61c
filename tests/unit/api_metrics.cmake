# api/metrics.c: the handlers against a real store, responses checked against openapi.yaml.
ty_unit_test(test_api_metrics ${CMAKE_CURRENT_LIST_DIR}/test_api_metrics.c ty_api ty_test_support)
target_sources(test_api_metrics PRIVATE ${CMAKE_CURRENT_LIST_DIR}/test_api_fixture.c)
