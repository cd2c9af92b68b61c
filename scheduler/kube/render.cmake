# ty_kube_render: the pure parts of the Kubernetes backend, which talk to no server:
#   profile.c    the cluster profile (libyaml)
#   render.c     a job's attempt as Kubernetes objects (jansson)
#   placement.c  the zone an attempt's gang fits in, from a node inventory
add_library(ty_kube_render STATIC
  ${CMAKE_CURRENT_LIST_DIR}/profile.c
  ${CMAKE_CURRENT_LIST_DIR}/render.c
  ${CMAKE_CURRENT_LIST_DIR}/placement.c)
ty_target(ty_kube_render)
target_link_libraries(ty_kube_render PUBLIC PkgConfig::JANSSON PkgConfig::YAML ty_common)
