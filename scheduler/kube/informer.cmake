# ty_kube_informer: list-then-watch caches of Kubernetes collections, each on a thread of its own
# (the status of jobs' objects and the node inventory).
add_library(ty_kube_informer STATIC ${CMAKE_CURRENT_LIST_DIR}/informer.c)
ty_target(ty_kube_informer)
target_link_libraries(ty_kube_informer PUBLIC ty_kube_client PkgConfig::JANSSON Threads::Threads)
