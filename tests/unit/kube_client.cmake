# The Kubernetes API client: kubeconfig loading and credential plugins; requests, retries,
# watches and TLS against a libmicrohttpd server inside the test.
ty_unit_test(test_kubeconfig ${CMAKE_CURRENT_LIST_DIR}/test_kubeconfig.c ty_kube_client)
target_compile_definitions(test_kubeconfig PRIVATE
  TY_KUBECONFIG_FIXTURES="${PROJECT_SOURCE_DIR}/tests/fixtures/kubeconfig")

ty_unit_test(test_kclient ${CMAKE_CURRENT_LIST_DIR}/test_kclient.c ty_kube_client PkgConfig::MHD)
target_compile_definitions(test_kclient PRIVATE
  TY_KUBECONFIG_FIXTURES="${PROJECT_SOURCE_DIR}/tests/fixtures/kubeconfig"
  TY_TRANSCRIPTS_DIR="${PROJECT_SOURCE_DIR}/tests/fixtures/kubernetes-transcripts")
# GnuTLS (libmicrohttpd's TLS) lets the test server check the client certificate it was shown.
pkg_check_modules(GNUTLS IMPORTED_TARGET gnutls)
if(GNUTLS_FOUND)
  target_link_libraries(test_kclient PRIVATE PkgConfig::GNUTLS)
  target_compile_definitions(test_kclient PRIVATE TY_HAVE_GNUTLS=1)
endif()

# Parsing only the named parts of a JSON text (kpick.c): tables of texts, picks and results.
ty_unit_test(test_kpick ${CMAKE_CURRENT_LIST_DIR}/test_kpick.c ty_kube_client)
