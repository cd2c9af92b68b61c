# test_kube_backend: the Kubernetes backend's operations against the fake Kubernetes API server
# on loopback: a gang's life, OOM, eviction, spot reclaim, waiting for capacity, node groups
# growing from zero (or not), 409 adoption, recovery by a second backend, faults, a rejected Job.
add_executable(test_kube_backend ${CMAKE_CURRENT_LIST_DIR}/test_kube_backend.c)
ty_target(test_kube_backend)
target_link_libraries(test_kube_backend PRIVATE ty_test_support ty_kube_backend PkgConfig::CURL
                      PkgConfig::JANSSON PkgConfig::CMOCKA)
target_compile_definitions(test_kube_backend PRIVATE
  FK_NODES="${PROJECT_SOURCE_DIR}/tests/fixtures/fake-kube/nodes-14.json"
  KBE_PROFILE="${PROJECT_SOURCE_DIR}/tests/fixtures/fake-kube/profile-backend.yaml")
add_dependencies(test_kube_backend fake-kube-apiserver)
add_test(NAME test_kube_backend COMMAND test_kube_backend $<TARGET_FILE:fake-kube-apiserver>)
set_tests_properties(test_kube_backend PROPERTIES LABELS integration TIMEOUT 300)
