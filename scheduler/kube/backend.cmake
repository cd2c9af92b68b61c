# ty_kube_backend: the Kubernetes backend (backend.h) joining the client, the informers, the
# profile, rendering and placement:
#   kube_backend.c  the operations, the inventory and the worker thread that writes to the API
#   kube_events.c   pod and node changes as backend events
#   kube_cluster.c  the cluster view for people, the quarantined nodes kept out, the nodes the
#                   profile does not know
#   kube_logs.c     the pods' logs streamed into the server's rank logs (ranklog.h)
add_library(ty_kube_backend STATIC
  ${CMAKE_CURRENT_LIST_DIR}/kube_backend.c
  ${CMAKE_CURRENT_LIST_DIR}/kube_events.c
  ${CMAKE_CURRENT_LIST_DIR}/kube_cluster.c
  ${CMAKE_CURRENT_LIST_DIR}/kube_logs.c)
ty_target(ty_kube_backend)
target_link_libraries(ty_kube_backend PUBLIC ty_kube_informer ty_kube_inventory ty_kube_render ty_quarantine
                      ty_kube_client ty_ranklog
                      ty_common PkgConfig::JANSSON Threads::Threads)
