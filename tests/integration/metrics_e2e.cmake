# test_metrics_e2e: a real 2-rank trainyard-worker job under `trainyard serve` reports its
# loss curve with its job token; GET /v1/jobs/{id}/metrics reads it back.
add_executable(test_metrics_e2e ${CMAKE_CURRENT_LIST_DIR}/test_metrics_e2e.c)
ty_target(test_metrics_e2e)
target_link_libraries(test_metrics_e2e PRIVATE ty_test_support ty_rt_testdata PkgConfig::CURL
                      PkgConfig::JANSSON PkgConfig::CMOCKA)
# The server runs the worker of this build tree (beside it in bin/).
add_dependencies(test_metrics_e2e trainyard trainyard-worker)
add_test(NAME test_metrics_e2e
         COMMAND test_metrics_e2e $<TARGET_FILE:trainyard> ${PROJECT_SOURCE_DIR}/openapi/openapi.yaml)
set_tests_properties(test_metrics_e2e PROPERTIES LABELS "integration;runtime" TIMEOUT 300)
