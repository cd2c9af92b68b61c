# Teams and ownership with the real server: another team's job and sweep are 404 on every
# route and absent from lists and streams; the admin sees all; team deletion and quota
# changes; the CLI's team commands; a one-team install as before.
add_executable(test_teams ${CMAKE_CURRENT_LIST_DIR}/test_teams.c)
ty_target(test_teams)
target_link_libraries(test_teams PRIVATE ty_test_support PkgConfig::SQLITE PkgConfig::CURL
                      PkgConfig::JANSSON PkgConfig::CMOCKA)
add_dependencies(test_teams trainyard)
add_test(NAME test_teams COMMAND test_teams $<TARGET_FILE:trainyard>
                                 ${PROJECT_SOURCE_DIR}/openapi/openapi.yaml)
set_tests_properties(test_teams PROPERTIES LABELS integration TIMEOUT 180)
