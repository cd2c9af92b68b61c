# The OpenAPI validator of tests/support, and the route table against openapi.yaml.
ty_unit_test(test_openapi ${CMAKE_CURRENT_LIST_DIR}/test_openapi.c ty_test_support ty_api)
target_compile_definitions(test_openapi PRIVATE
  TY_OPENAPI_YAML="${PROJECT_SOURCE_DIR}/openapi/openapi.yaml"
  TY_K8S_OPENAPI_DIR="${PROJECT_SOURCE_DIR}/tests/fixtures/kubernetes-openapi")
