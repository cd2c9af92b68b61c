# Unit tests of cli/ (one file per module).
ty_unit_test(test_cli_yaml ${CMAKE_CURRENT_LIST_DIR}/test_cli_yaml.c ty_cli)
target_compile_definitions(test_cli_yaml PRIVATE FIXTURES="${PROJECT_SOURCE_DIR}/tests/fixtures")
