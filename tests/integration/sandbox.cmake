# test_sandbox: the local backend's disk limit of a job's directory, the total of a job's
# logs across attempts, and a sandbox programs can live in (/tmp, /dev/shm, $HOME, a
# 2-rank trainyard-worker gang), against the real server.
add_executable(test_sandbox ${CMAKE_CURRENT_LIST_DIR}/test_sandbox.c)
ty_target(test_sandbox)
target_link_libraries(test_sandbox PRIVATE ty_test_support ty_rt_testdata PkgConfig::CURL
                      PkgConfig::JANSSON PkgConfig::CMOCKA)
# The server runs the worker of this build tree (beside it in bin/).
add_dependencies(test_sandbox trainyard trainyard-worker)
add_test(NAME test_sandbox
         COMMAND test_sandbox $<TARGET_FILE:trainyard> ${PROJECT_SOURCE_DIR}/openapi/openapi.yaml)
set_tests_properties(test_sandbox PROPERTIES LABELS integration TIMEOUT 300)
