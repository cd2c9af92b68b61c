# test_fake_kube: the fake Kubernetes API server (tests/support/fake_kube)
# against the recorded answers of a real v1.26 apiserver.
add_executable(test_fake_kube ${CMAKE_CURRENT_LIST_DIR}/test_fake_kube.c)
ty_target(test_fake_kube)
target_link_libraries(test_fake_kube PRIVATE ty_test_support PkgConfig::CURL PkgConfig::JANSSON
                      PkgConfig::CMOCKA)
target_compile_definitions(test_fake_kube PRIVATE
  FK_TRANSCRIPTS="${PROJECT_SOURCE_DIR}/tests/fixtures/kubernetes-transcripts"
  FK_NODES="${PROJECT_SOURCE_DIR}/tests/fixtures/fake-kube/nodes-14.json")
add_dependencies(test_fake_kube fake-kube-apiserver)
add_test(NAME test_fake_kube COMMAND test_fake_kube $<TARGET_FILE:fake-kube-apiserver>)
set_tests_properties(test_fake_kube PROPERTIES LABELS integration TIMEOUT 180)
