# ty_fake_backend: a backend that runs nothing (fake_backend.c), for the reconcile loop's
# tests; the test plays the world through it.
add_library(ty_fake_backend STATIC ${CMAKE_CURRENT_LIST_DIR}/fake_backend.c)
ty_target(ty_fake_backend)
target_link_libraries(ty_fake_backend PUBLIC Threads::Threads)
