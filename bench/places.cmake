# bench_places: where PENDING jobs stand (store_jobs_line_places) with a million jobs in one
# line: a page's places beside the page's own read, one job half-way down beside counting the
# index entries ahead of it, and submissions with pending_counts' triggers beside without.
#   cmake --build BUILD --target bench_places && BUILD/bench/bench_places
add_executable(bench_places ${CMAKE_CURRENT_LIST_DIR}/bench_places.c)
ty_target(bench_places)
target_link_libraries(bench_places PRIVATE bench_util ty_store PkgConfig::SQLITE)
