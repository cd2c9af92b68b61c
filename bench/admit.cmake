# bench_admit: the admission policy (scheduler/admit.c) alone, at cohort scale (50 teams,
# 3 GPU types, 1,000 GPUs, 10,000 and 100,000 pending jobs): admissions decided per second
# and the cost of one round, which must not grow with the pending jobs.
#   cmake --build BUILD --target bench_admit && BUILD/bench/bench_admit
add_executable(bench_admit ${CMAKE_CURRENT_LIST_DIR}/bench_admit.c)
ty_target(bench_admit)
target_link_libraries(bench_admit PRIVATE ty_admit)
