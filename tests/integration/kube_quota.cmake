# test_kube_quota: admission across teams with the real server on the Kubernetes backend against
# the fake API server: borrowing, reclaim by graceful preemption (the victim's Job deleted, its
# attempt Preempted, restarts unchanged), a kill and restart in the middle that counts the
# adopted Jobs before admitting anything.
add_executable(test_kube_quota ${CMAKE_CURRENT_LIST_DIR}/test_kube_quota.c)
ty_target(test_kube_quota)
target_link_libraries(test_kube_quota PRIVATE ty_test_support PkgConfig::CURL PkgConfig::JANSSON
                      PkgConfig::CMOCKA)
target_compile_definitions(test_kube_quota PRIVATE
  TY_KUBE_PROFILE_FIXED="${PROJECT_SOURCE_DIR}/tests/fixtures/kube-serve/profile-fixed.yaml"
  TY_KUBE_NODES="${PROJECT_SOURCE_DIR}/tests/fixtures/fake-kube/nodes-14.json")
add_dependencies(test_kube_quota trainyard fake-kube-apiserver)
add_test(NAME test_kube_quota
         COMMAND test_kube_quota $<TARGET_FILE:trainyard> ${PROJECT_SOURCE_DIR}/openapi/openapi.yaml
                 $<TARGET_FILE:fake-kube-apiserver>)
set_tests_properties(test_kube_quota PROPERTIES LABELS integration TIMEOUT 300)
