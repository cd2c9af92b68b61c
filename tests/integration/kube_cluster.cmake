# test_kube_cluster: GET /v1/cluster and node quarantine through the real server on the
# Kubernetes backend against the fake API server (tests/support/fake_kube).
add_executable(test_kube_cluster ${CMAKE_CURRENT_LIST_DIR}/test_kube_cluster.c)
ty_target(test_kube_cluster)
target_link_libraries(test_kube_cluster PRIVATE ty_test_support PkgConfig::CURL PkgConfig::JANSSON
                      PkgConfig::CMOCKA)
target_compile_definitions(test_kube_cluster PRIVATE
  TY_KUBE_PROFILE="${PROJECT_SOURCE_DIR}/deploy/cluster-profile.example.yaml"
  TY_KUBE_NODES="${PROJECT_SOURCE_DIR}/tests/fixtures/fake-kube/nodes-14.json")
add_dependencies(test_kube_cluster trainyard fake-kube-apiserver)
add_test(NAME test_kube_cluster
         COMMAND test_kube_cluster $<TARGET_FILE:trainyard> ${PROJECT_SOURCE_DIR}/openapi/openapi.yaml
                 $<TARGET_FILE:fake-kube-apiserver>)
set_tests_properties(test_kube_cluster PROPERTIES LABELS integration TIMEOUT 300)
