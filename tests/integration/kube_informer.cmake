# test_kube_informer: the informer against the fake Kubernetes API server on loopback: lists,
# watches resumed after drops, re-lists after 410, injected faults, stop.
add_executable(test_kube_informer ${CMAKE_CURRENT_LIST_DIR}/test_kube_informer.c)
ty_target(test_kube_informer)
target_link_libraries(test_kube_informer PRIVATE ty_test_support ty_kube_informer PkgConfig::CURL
                      PkgConfig::JANSSON PkgConfig::CMOCKA)
target_compile_definitions(test_kube_informer PRIVATE
  FK_NODES="${PROJECT_SOURCE_DIR}/tests/fixtures/fake-kube/nodes-14.json")
add_dependencies(test_kube_informer fake-kube-apiserver)
add_test(NAME test_kube_informer
         COMMAND test_kube_informer $<TARGET_FILE:fake-kube-apiserver>)
set_tests_properties(test_kube_informer PROPERTIES LABELS integration TIMEOUT 180)
