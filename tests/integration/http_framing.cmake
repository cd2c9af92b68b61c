# Strict HTTP framing of the real server: smuggling, ambiguous lengths and codings, raw sockets.
add_executable(test_http_framing ${CMAKE_CURRENT_LIST_DIR}/test_http_framing.c)
ty_target(test_http_framing)
target_link_libraries(test_http_framing PRIVATE ty_test_support PkgConfig::CURL
                      PkgConfig::JANSSON PkgConfig::CMOCKA)
add_dependencies(test_http_framing trainyard)
add_test(NAME test_http_framing
         COMMAND test_http_framing $<TARGET_FILE:trainyard> ${PROJECT_SOURCE_DIR}/openapi/openapi.yaml)
set_tests_properties(test_http_framing PROPERTIES LABELS integration TIMEOUT 120)
