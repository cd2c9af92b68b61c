# Sweeps with the real server: trials created with the sweep, seeds, the best trial, cancel,
# parallelism and median early stopping.
add_executable(test_sweeps ${CMAKE_CURRENT_LIST_DIR}/test_sweeps.c)
ty_target(test_sweeps)
target_link_libraries(test_sweeps PRIVATE ty_test_support PkgConfig::SQLITE PkgConfig::CURL
                      PkgConfig::JANSSON PkgConfig::CMOCKA)
add_dependencies(test_sweeps trainyard)
add_test(NAME test_sweeps COMMAND test_sweeps $<TARGET_FILE:trainyard>
                                  ${PROJECT_SOURCE_DIR}/openapi/openapi.yaml)
set_tests_properties(test_sweeps PROPERTIES LABELS integration TIMEOUT 180)
