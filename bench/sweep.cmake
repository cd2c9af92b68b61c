# bench_sweep_spec: the 422 layer of POST /v1/sweeps for the largest grid (1,000 trials):
# the time to validate the body and to build every trial's job spec.
#   cmake --build BUILD --target bench_sweep_spec && BUILD/bench/bench_sweep_spec
add_executable(bench_sweep_spec ${CMAKE_CURRENT_LIST_DIR}/bench_sweep_spec.c)
ty_target(bench_sweep_spec)
target_link_libraries(bench_sweep_spec PRIVATE ty_api)

# bench_sweep: a 1,000-trial grid sweep created through `trainyard serve` and drained on the
# local backend (trials/s), beside the same jobs through one POST /v1/jobs:batch:
#   cmake --build BUILD --target bench_sweep && BUILD/bench/bench_sweep
add_executable(bench_sweep ${CMAKE_CURRENT_LIST_DIR}/bench_sweep.c)
ty_target(bench_sweep)
target_link_libraries(bench_sweep PRIVATE bench_util PkgConfig::CURL PkgConfig::JANSSON)
target_compile_definitions(bench_sweep PRIVATE BENCH_TRAINYARD="$<TARGET_FILE:trainyard>")
add_dependencies(bench_sweep trainyard)
