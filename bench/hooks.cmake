# bench_hooks: a flood of badly signed webhook deliveries at 8 connections; requests a second,
# the server's CPU (from /proc/<pid>/stat) and the growth of its log.
#   cmake --build BUILD --target bench_hooks && BUILD/bench/bench_hooks [--trainyard PATH]
add_executable(bench_hooks ${CMAKE_CURRENT_LIST_DIR}/bench_hooks.c)
ty_target(bench_hooks)
target_link_libraries(bench_hooks PRIVATE bench_util PkgConfig::CURL)
target_compile_definitions(bench_hooks PRIVATE BENCH_TRAINYARD="$<TARGET_FILE:trainyard>")
add_dependencies(bench_hooks trainyard)
