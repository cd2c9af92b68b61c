# Admission across teams with the real server (local backend, --local-gpus 4): borrowing,
# QuotaExceeded with positions, reclaim by graceful preemption (restarts unchanged), a
# restart in the middle that rebuilds usage.
add_executable(test_quota ${CMAKE_CURRENT_LIST_DIR}/test_quota.c)
ty_target(test_quota)
target_link_libraries(test_quota PRIVATE ty_test_support PkgConfig::SQLITE PkgConfig::CURL
                      PkgConfig::JANSSON PkgConfig::CMOCKA)
add_dependencies(test_quota trainyard)
add_test(NAME test_quota COMMAND test_quota $<TARGET_FILE:trainyard>
                                 ${PROJECT_SOURCE_DIR}/openapi/openapi.yaml)
set_tests_properties(test_quota PROPERTIES LABELS integration TIMEOUT 180)
