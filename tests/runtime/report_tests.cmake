# test_runtime_report: runtime/report against a libmicrohttpd receiver on loopback, and the
# real trainyard-worker reporting to it. Included from tests/runtime/CMakeLists.txt.
if(TARGET PkgConfig::CMOCKA)
  add_executable(test_runtime_report ${CMAKE_CURRENT_LIST_DIR}/test_report.c)
  ty_target(test_runtime_report)
  target_compile_definitions(test_runtime_report PRIVATE
                             TY_WORKER_BIN="$<TARGET_FILE:trainyard-worker>")
  target_link_libraries(test_runtime_report PRIVATE ty_report ty_rt_testdata ty_net
                        PkgConfig::MHD PkgConfig::JANSSON PkgConfig::CMOCKA m)
  add_dependencies(test_runtime_report trainyard-worker)
  add_test(NAME test_runtime_report COMMAND test_runtime_report)
  set_tests_properties(test_runtime_report PROPERTIES LABELS "unit;runtime" TIMEOUT 300)
endif()
