# test_rendezvous: strangers at a real 2-rank trainyard-worker job's rendezvous (a
# connection that sends garbage, a worker with a wrong secret) cost it nothing.
add_executable(test_rendezvous ${CMAKE_CURRENT_LIST_DIR}/test_rendezvous.c)
ty_target(test_rendezvous)
target_link_libraries(test_rendezvous PRIVATE ty_test_support ty_rt_testdata PkgConfig::CURL
                      PkgConfig::JANSSON PkgConfig::CMOCKA)
# The server runs the worker of this build tree (beside it in bin/).
add_dependencies(test_rendezvous trainyard trainyard-worker)
add_test(NAME test_rendezvous
         COMMAND test_rendezvous $<TARGET_FILE:trainyard> ${PROJECT_SOURCE_DIR}/openapi/openapi.yaml)
set_tests_properties(test_rendezvous PROPERTIES LABELS "integration;runtime" TIMEOUT 300)
