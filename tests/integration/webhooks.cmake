# CI webhooks with the real server: GitHub, GitLab and generic deliveries signed by the test.
add_executable(test_webhooks ${CMAKE_CURRENT_LIST_DIR}/test_webhooks.c)
ty_target(test_webhooks)
target_link_libraries(test_webhooks PRIVATE ty_test_support PkgConfig::CURL PkgConfig::JANSSON
                      PkgConfig::CMOCKA OpenSSL::Crypto)
target_compile_definitions(test_webhooks
                           PRIVATE FIXTURES="${PROJECT_SOURCE_DIR}/tests/fixtures/webhooks")
add_dependencies(test_webhooks trainyard)
add_test(NAME test_webhooks
         COMMAND test_webhooks $<TARGET_FILE:trainyard> ${PROJECT_SOURCE_DIR}/openapi/openapi.yaml)
set_tests_properties(test_webhooks PROPERTIES LABELS integration TIMEOUT 120)
