#!/usr/bin/env bash
# The local backend's scheduling overhead with every rank sandboxed (the default)
# against --local-sandbox=off, in one run: bench_sched alternates the two modes
# (on, off, on, off, ...) so that both see the same machine, then prints the best
# drain rate and the median of each mode's latency percentiles, and their ratios.
#
#   bench/run_sched_bench.sh [BUILD_DIR [PAIRS [BENCH_SCHED ARGS...]]]
#
# BUILD_DIR defaults to build (Release); PAIRS (default 2) is how many on/off pairs
# run. Extra arguments go to every bench_sched run (e.g. --slots 8).
set -euo pipefail
build=${1:-build}
pairs=${2:-2}
shift $(( $# > 2 ? 2 : $# ))
bench="$build/bench/bench_sched"
[ -x "$bench" ] || { echo "no $bench: cmake --build $build --target bench_sched" >&2; exit 2; }

echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for ((i = 1; i <= pairs; i++)); do
  for mode in on off; do
    line=$("$bench" --rounds 2 --latency-jobs 100 --server-arg "--local-sandbox=$mode" "$@" |
           tail -n 1)
    echo "$mode $line" | tee -a "$out"
  done
done

# Best drain rate, and medians of the latency percentiles, per mode.
awk '
function val(k,   i, kv) { for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == k) return kv[2] } }
{ m = $1; n[m]++; r = val("best_jobs_per_s"); if (r > best[m]) best[m] = r
  p50[m, n[m]] = val("p50_ms"); p90[m, n[m]] = val("p90_ms") }
function med(a, m, k,   v, i, j, t) {
  for (i = 1; i <= k; i++) v[i] = a[m, i]
  for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
  return k % 2 ? v[(k + 1) / 2] : (v[k / 2] + v[k / 2 + 1]) / 2 }
END {
  on50 = med(p50, "on", n["on"]); off50 = med(p50, "off", n["off"])
  on90 = med(p90, "on", n["on"]); off90 = med(p90, "off", n["off"])
  printf "\n%-34s %12s %12s %10s\n", "", "sandbox on", "sandbox off", "on/off"
  printf "%-34s %12.0f %12.0f %9.2fx\n", "queued jobs drained/s (best)", best["on"], best["off"], best["on"] / best["off"]
  printf "%-34s %12.2f %12.2f %9.2fx\n", "submission to exec p50, ms", on50, off50, on50 / off50
  printf "%-34s %12.2f %12.2f %9.2fx\n", "submission to exec p90, ms", on90, off90, on90 / off90
  printf "%-34s %12.2f\n", "sandbox cost at start (p50), ms", on50 - off50
}' "$out"
