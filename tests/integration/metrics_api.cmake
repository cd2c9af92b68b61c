# Job tokens and metrics with the real server: what a job's token may do, and a job that
# reports its loss with curl.
add_executable(test_metrics_api ${CMAKE_CURRENT_LIST_DIR}/test_metrics_api.c)
ty_target(test_metrics_api)
target_link_libraries(test_metrics_api PRIVATE ty_test_support PkgConfig::SQLITE PkgConfig::CURL
                      PkgConfig::JANSSON PkgConfig::CMOCKA)
add_dependencies(test_metrics_api trainyard)
add_test(NAME test_metrics_api
         COMMAND test_metrics_api $<TARGET_FILE:trainyard>
                 ${PROJECT_SOURCE_DIR}/openapi/openapi.yaml)
set_tests_properties(test_metrics_api PROPERTIES LABELS integration TIMEOUT 180)
