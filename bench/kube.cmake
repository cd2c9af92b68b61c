# bench_kube: the Kubernetes backend at cluster scale against the fake API server
# (3,000 nodes by default): a sweep through the server beside the same objects created directly,
# jobs/s to objects created, server CPU a job, pod change -> job state latency, RSS.
# With --free-to-admit: from a GPU freeing to the next waiting job's Job created, p50/p99.
#   cmake --build BUILD --target bench_kube && BUILD/bench/bench_kube [--free-to-admit]
add_executable(bench_kube ${CMAKE_CURRENT_LIST_DIR}/bench_kube.c)
ty_target(bench_kube)
target_link_libraries(bench_kube PRIVATE bench_util ty_net ty_kube_render PkgConfig::CURL
                      PkgConfig::JANSSON Threads::Threads)
target_compile_definitions(bench_kube PRIVATE BENCH_TRAINYARD="$<TARGET_FILE:trainyard>"
                           BENCH_FAKE="$<TARGET_FILE:fake-kube-apiserver>"
                           BENCH_PROFILE="${PROJECT_SOURCE_DIR}/deploy/cluster-profile.example.yaml"
                           BENCH_PROFILE_FIXED="${PROJECT_SOURCE_DIR}/tests/fixtures/kube-serve/profile-fixed.yaml")
add_dependencies(bench_kube trainyard fake-kube-apiserver)
