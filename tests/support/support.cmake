# ty_test_support: the OpenAPI validator (oas*.c) and the integration harness
# that runs the real `trainyard` binary (ty_harness.c).
add_library(ty_test_support STATIC
  ${CMAKE_CURRENT_LIST_DIR}/oas.c
  ${CMAKE_CURRENT_LIST_DIR}/oas_yaml.c
  ${CMAKE_CURRENT_LIST_DIR}/oas_schema.c
  ${CMAKE_CURRENT_LIST_DIR}/ty_harness.c
  ${CMAKE_CURRENT_LIST_DIR}/fake_kube_proc.c)
ty_target(ty_test_support)
target_link_libraries(ty_test_support PUBLIC PkgConfig::JANSSON PkgConfig::YAML PkgConfig::CURL
                      PkgConfig::CMOCKA Threads::Threads m)
