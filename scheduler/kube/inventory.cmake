# ty_kube_inventory: nodes and the GPUs their pods use, kept change by change for placement.
add_library(ty_kube_inventory STATIC ${CMAKE_CURRENT_LIST_DIR}/inventory.c)
ty_target(ty_kube_inventory)
target_link_libraries(ty_kube_inventory PUBLIC ty_kube_render ty_common PkgConfig::JANSSON
                      Threads::Threads)
