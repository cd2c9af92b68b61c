# test_comm: ranks as forked processes on 127.0.0.1. Included from tests/runtime/CMakeLists.txt.
if(TARGET PkgConfig::CMOCKA)
  add_executable(test_comm ${CMAKE_CURRENT_LIST_DIR}/test_comm.c)
  ty_target(test_comm)
  target_link_libraries(test_comm PRIVATE ty_comm PkgConfig::CMOCKA m)
  add_test(NAME test_comm COMMAND test_comm)
  set_tests_properties(test_comm PROPERTIES LABELS "unit;runtime" TIMEOUT 180)
endif()
