# ty_kube_client: the Kubernetes API client (libcurl over OpenSSL) and kubeconfig loading
# (libyaml), used from the Kubernetes backend's own threads; kpick.c parses only the parts of
# an object (a watch event) that are wanted.
add_library(ty_kube_client STATIC
  ${CMAKE_CURRENT_LIST_DIR}/kubeconfig.c
  ${CMAKE_CURRENT_LIST_DIR}/kclient.c
  ${CMAKE_CURRENT_LIST_DIR}/kpick.c)
ty_target(ty_kube_client)
target_link_libraries(ty_kube_client PUBLIC ty_common PkgConfig::CURL PkgConfig::YAML
                      PkgConfig::JANSSON OpenSSL::Crypto Threads::Threads m)
