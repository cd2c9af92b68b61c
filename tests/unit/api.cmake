# api/: one test per source file. Handler tests (jobs, tokens, ops) run against
# a real store in a temporary directory and check every response against the
# embedded openapi/openapi.yaml (test_api_fixture.c).
ty_unit_test(test_spec ${CMAKE_CURRENT_LIST_DIR}/test_spec.c ty_api)
ty_unit_test(test_api_resp ${CMAKE_CURRENT_LIST_DIR}/test_api_resp.c ty_api)
ty_unit_test(test_api_request ${CMAKE_CURRENT_LIST_DIR}/test_api_request.c ty_api)
ty_unit_test(test_api_routes ${CMAKE_CURRENT_LIST_DIR}/test_api_routes.c ty_api ty_test_support)
foreach(t jobs logs tokens ops teams)
  ty_unit_test(test_api_${t} ${CMAKE_CURRENT_LIST_DIR}/test_api_${t}.c ty_api ty_test_support)
  target_sources(test_api_${t} PRIVATE ${CMAKE_CURRENT_LIST_DIR}/test_api_fixture.c)
endforeach()
