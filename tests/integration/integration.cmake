# Integration tests: each starts the real `trainyard` binary on loopback and
# drives it over HTTP, checking every response against openapi/openapi.yaml.
# The binary and the document are passed on the command line.
foreach(t test_api_http test_crash test_jobs_run test_slow_clients)
  add_executable(${t} ${CMAKE_CURRENT_LIST_DIR}/${t}.c)
  ty_target(${t})
  target_link_libraries(${t} PRIVATE ty_test_support PkgConfig::SQLITE PkgConfig::CURL
                        PkgConfig::JANSSON PkgConfig::CMOCKA)
  # Building a test builds the server it runs.
  add_dependencies(${t} trainyard)
  add_test(NAME ${t}
           COMMAND ${t} $<TARGET_FILE:trainyard> ${PROJECT_SOURCE_DIR}/openapi/openapi.yaml)
  set_tests_properties(${t} PROPERTIES LABELS integration TIMEOUT 180)
endforeach()
# test_jobs_run runs real jobs (a burst of 500 among them): it needs longer.
set_tests_properties(test_jobs_run PROPERTIES TIMEOUT 300)
