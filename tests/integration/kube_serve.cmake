# test_kube_serve: the real server on the Kubernetes backend against the fake API server
# (tests/support/fake_kube), on deploy/cluster-profile.example.yaml unchanged.
add_executable(test_kube_serve ${CMAKE_CURRENT_LIST_DIR}/test_kube_serve.c)
ty_target(test_kube_serve)
target_link_libraries(test_kube_serve PRIVATE ty_test_support PkgConfig::CURL PkgConfig::JANSSON
                      PkgConfig::CMOCKA)
target_compile_definitions(test_kube_serve PRIVATE
  TY_KUBE_PROFILE="${PROJECT_SOURCE_DIR}/deploy/cluster-profile.example.yaml"
  TY_KUBE_PROFILE_FIXED="${PROJECT_SOURCE_DIR}/tests/fixtures/kube-serve/profile-fixed.yaml"
  TY_KUBE_NODES="${PROJECT_SOURCE_DIR}/tests/fixtures/fake-kube/nodes-14.json")
add_dependencies(test_kube_serve trainyard fake-kube-apiserver)
add_test(NAME test_kube_serve
         COMMAND test_kube_serve $<TARGET_FILE:trainyard> ${PROJECT_SOURCE_DIR}/openapi/openapi.yaml
                 $<TARGET_FILE:fake-kube-apiserver>)
set_tests_properties(test_kube_serve PROPERTIES LABELS integration TIMEOUT 300)
