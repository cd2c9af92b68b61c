# bench_collectives: ring all-reduce / reduce-scatter / all-gather against loopback TCP.
# Included from bench/CMakeLists.txt.
add_executable(bench_collectives ${CMAKE_CURRENT_LIST_DIR}/bench_collectives.c)
ty_target(bench_collectives)
target_link_libraries(bench_collectives PRIVATE ty_comm)
