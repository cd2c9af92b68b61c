# Benchmarks of the API server: the load tool and the disk's fdatasync rate.
# bench/run_server_bench.sh runs them against a built `trainyard` binary.
add_executable(bench_submit ${CMAKE_CURRENT_LIST_DIR}/bench_submit.c)
ty_target(bench_submit)
target_link_libraries(bench_submit PRIVATE bench_util PkgConfig::CURL PkgConfig::JANSSON)

add_executable(bench_fsync ${CMAKE_CURRENT_LIST_DIR}/bench_fsync.c)
ty_target(bench_fsync)
