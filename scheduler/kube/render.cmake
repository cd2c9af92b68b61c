# ty_kube_render: the pure parts of the Kubernetes backend, which talk to no server:
#   profile.c    the cluster profile (libyaml)
add_library(ty_kube_render STATIC
  ${CMAKE_CURRENT_LIST_DIR}/profile.c)
ty_target(ty_kube_render)
target_link_libraries(ty_kube_render PUBLIC PkgConfig::JANSSON PkgConfig::YAML ty_common)
