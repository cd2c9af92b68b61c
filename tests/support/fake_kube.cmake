# fake-kube-apiserver: a fake Kubernetes v1.26 API server (with the Job
# controller, garbage collector and scheduler) for the integration tests of
# the Kubernetes backend. It validates against the schemas in tests/fixtures.
add_executable(fake-kube-apiserver
  ${CMAKE_CURRENT_LIST_DIR}/fake_kube/fk_store.c
  ${CMAKE_CURRENT_LIST_DIR}/fake_kube/fk_valid.c
  ${CMAKE_CURRENT_LIST_DIR}/fake_kube/fk_ctrl.c
  ${CMAKE_CURRENT_LIST_DIR}/fake_kube/fk_sched.c
  ${CMAKE_CURRENT_LIST_DIR}/fake_kube/fk_watch.c
  ${CMAKE_CURRENT_LIST_DIR}/fake_kube/fk_logs.c
  ${CMAKE_CURRENT_LIST_DIR}/fake_kube/fk_control.c
  ${CMAKE_CURRENT_LIST_DIR}/fake_kube/fk_http.c)
ty_target(fake-kube-apiserver)
target_compile_definitions(fake-kube-apiserver PRIVATE
  FK_SWAGGER="${PROJECT_SOURCE_DIR}/tests/fixtures/kubernetes-openapi/swagger.json"
  FK_VOLCANO_CRD="${PROJECT_SOURCE_DIR}/tests/fixtures/crds/volcano/batch.volcano.sh_jobs.yaml")
target_link_libraries(fake-kube-apiserver PRIVATE ty_test_support ty_common PkgConfig::MHD
                      PkgConfig::JANSSON OpenSSL::Crypto Threads::Threads)
set_target_properties(fake-kube-apiserver PROPERTIES
  RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
