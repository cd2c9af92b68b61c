# bench_metrics: metric ingestion (points/s accepted durably from many reporting jobs)
# against a server it starts, beside GET /healthz and submission rates of the same run:
#   cmake --build BUILD --target bench_metrics && BUILD/bench/bench_metrics
# bench/bench_train_report.sh measures what reporting costs a training run.
add_executable(bench_metrics ${CMAKE_CURRENT_LIST_DIR}/bench_metrics.c)
ty_target(bench_metrics)
target_link_libraries(bench_metrics PRIVATE bench_util PkgConfig::CURL PkgConfig::JANSSON
                      Threads::Threads m)
target_compile_definitions(bench_metrics PRIVATE BENCH_TRAINYARD="$<TARGET_FILE:trainyard>")
add_dependencies(bench_metrics trainyard)
