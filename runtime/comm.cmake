# ty_comm: rendezvous and CPU collectives of trainyard-worker (runtime/comm.h).
# Included from runtime/CMakeLists.txt.
#   comm.c        the ring and its collectives
#   rendezvous.c  how the ring forms; the HMAC handshake of rendezvous.h (ty_crypto, libcrypto)
#   comm_net.c    text, clock and socket I/O both share (comm_int.h)
add_library(ty_comm STATIC
  ${CMAKE_CURRENT_LIST_DIR}/comm.c
  ${CMAKE_CURRENT_LIST_DIR}/rendezvous.c
  ${CMAKE_CURRENT_LIST_DIR}/comm_net.c)
ty_target(ty_comm)
target_link_libraries(ty_comm PUBLIC ty_common ty_net Threads::Threads)
