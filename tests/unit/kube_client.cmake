# The Kubernetes API client: kubeconfig loading and credential plugins; requests, retries,
# watches and TLS against a libmicrohttpd server inside the test.
ty_unit_test(test_kubeconfig ${CMAKE_CURRENT_LIST_DIR}/test_kubeconfig.c ty_kube_client)
target_compile_definitions(test_kubeconfig PRIVATE
  TY_KUBECONFIG_FIXTURES="${PROJECT_SOURCE_DIR}/tests/fixtures/kubeconfig")

