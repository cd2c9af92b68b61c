# The client commands end to end: the real `trainyard` binary run as a subprocess against a real
# `trainyard serve` on loopback.
add_executable(test_cli ${CMAKE_CURRENT_LIST_DIR}/test_cli.c)
ty_target(test_cli)
target_compile_definitions(test_cli PRIVATE FIXTURES="${PROJECT_SOURCE_DIR}/tests/fixtures")
target_link_libraries(test_cli PRIVATE ty_test_support PkgConfig::CURL PkgConfig::JANSSON
                      PkgConfig::CMOCKA Threads::Threads)
add_dependencies(test_cli trainyard)
add_test(NAME test_cli
         COMMAND test_cli $<TARGET_FILE:trainyard> ${PROJECT_SOURCE_DIR}/openapi/openapi.yaml)
set_tests_properties(test_cli PROPERTIES LABELS integration TIMEOUT 240)
