# ty_comm: rendezvous and CPU collectives of trainyard-worker (runtime/comm.h).
# Included from runtime/CMakeLists.txt.
add_library(ty_comm STATIC ${CMAKE_CURRENT_LIST_DIR}/comm.c)
ty_target(ty_comm)
target_link_libraries(ty_comm PUBLIC ty_net Threads::Threads)
