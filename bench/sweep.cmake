# bench_sweep_spec: the 422 layer of POST /v1/sweeps for the largest grid (1,000 trials):
# the time to validate the body and to build every trial's job spec.
#   cmake --build BUILD --target bench_sweep_spec && BUILD/bench/bench_sweep_spec
add_executable(bench_sweep_spec ${CMAKE_CURRENT_LIST_DIR}/bench_sweep_spec.c)
ty_target(bench_sweep_spec)
target_link_libraries(bench_sweep_spec PRIVATE ty_api)
