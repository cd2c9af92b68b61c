# bench_sched: the scheduling overhead of the local backend (how fast queued
# jobs drain, submission-to-exec latency) and, with --idle N, the CPU an idle
# server uses while N jobs wait in a full queue; bench_stamp is its latency job.
# Both default to the programs of this build tree:
#   cmake --build BUILD --target bench_sched && BUILD/bench/bench_sched
#   BUILD/bench/bench_sched --rounds 0 --latency-jobs 0 --idle 100000
add_executable(bench_stamp ${CMAKE_CURRENT_LIST_DIR}/bench_stamp.c)
ty_target(bench_stamp)
# Beside `trainyard`: the directory the local backend shows its sandboxed ranks.
set_target_properties(bench_stamp PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)

add_executable(bench_sched ${CMAKE_CURRENT_LIST_DIR}/bench_sched.c)
ty_target(bench_sched)
target_link_libraries(bench_sched PRIVATE bench_util PkgConfig::CURL PkgConfig::JANSSON)
target_compile_definitions(bench_sched PRIVATE BENCH_TRAINYARD="$<TARGET_FILE:trainyard>"
                           BENCH_STAMP="$<TARGET_FILE:bench_stamp>")
add_dependencies(bench_sched trainyard bench_stamp)
