# bench_sse: fan-out of the live event stream: 200 followers on GET /v1/events?follow=true
# while 1,000 jobs are submitted and cancelled; event time to delivery, p50/p99.
#   cmake --build BUILD --target bench_sse && BUILD/bench/bench_sse
add_executable(bench_sse ${CMAKE_CURRENT_LIST_DIR}/bench_sse.c)
ty_target(bench_sse)
target_link_libraries(bench_sse PRIVATE bench_util PkgConfig::CURL PkgConfig::JANSSON
                      Threads::Threads)
target_compile_definitions(bench_sse PRIVATE BENCH_TRAINYARD="$<TARGET_FILE:trainyard>")
add_dependencies(bench_sse trainyard)
