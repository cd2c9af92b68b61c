#!/usr/bin/env bash
# run_server_bench.sh - the API server benchmark: durable submissions, :batch,
# memory, and paging through 1,000,000 stored jobs, each figure beside its
# target and beside the raw fdatasync rate of the disk under the data dir.
#
#   bench/run_server_bench.sh [BUILD_DIR]      (default ./build; builds nothing)
#
# Two modes, each on its own fresh server and database, each labelled in the
# output:
#   paused   admission paused (`serve --queue-limit 0`): every job stays
#            PENDING, so the figures are the API's and the store's alone. All
#            the figures: submissions, :batch, the fill, paging, memory.
#   running  jobs running (no queue limit): the scheduler admits and launches
#            a gang for every job that fits, as a serving server does, beside
#            the API. The submission figures (single jobs and :batch) only,
#            with the attempts launched meanwhile.
#
# Needs BUILD_DIR/bin/trainyard, BUILD_DIR/bench/bench_submit and
# BUILD_DIR/bench/bench_fsync. The database lives in a fresh directory under
# ${TMPDIR:-/tmp}, removed at the end; the fdatasync rate is measured there too.
# Knobs (environment): BENCH_MODES the modes to run, in order (default
# "paused running"), BENCH_DURATION seconds per measured run (default 5),
# BENCH_FILL jobs stored before the paging runs (default 1000000),
# BENCH_LOG_LEVEL the server's log level (default info: request logs included,
# written to a file on the same disk), BENCH_TOOL the load tool for single-job
# submissions: wrk (default when installed) or submit (bench_submit, libcurl).
#
# Why wrk for single jobs: on this 2-core machine the load tool competes with
# the server for CPU, and wrk (with a Lua request() giving every job its own
# name) costs about half the client CPU per request of libcurl's multi
# interface. :batch, paging and the fill use bench_submit, where the client's
# cost per job is negligible and page tokens must be followed.
set -euo pipefail

build=${1:-./build}
duration=${BENCH_DURATION:-5}
fill=${BENCH_FILL:-1000000}
log_level=${BENCH_LOG_LEVEL:-info}
warmup=1
single_tool=${BENCH_TOOL:-}
if [[ -z $single_tool ]]; then
    single_tool=submit
    command -v wrk >/dev/null && single_tool=wrk
fi
[[ $single_tool == wrk || $single_tool == submit ]] || { echo "BENCH_TOOL: wrk or submit" >&2; exit 2; }
batch_duration=3
list_duration=2
modes=${BENCH_MODES:-paused running}
for m in $modes; do
    [[ $m == paused || $m == running ]] || { echo "BENCH_MODES: paused and/or running" >&2; exit 2; }
done

trainyard=$build/bin/trainyard
submit=$build/bench/bench_submit
fsyncb=$build/bench/bench_fsync
for bin in "$trainyard" "$submit" "$fsyncb"; do
    if [[ ! -x $bin ]]; then
        echo "run_server_bench: $bin not found; build first:" >&2
        echo "  cmake -S . -B $build -DCMAKE_BUILD_TYPE=Release && cmake --build $build" >&2
        exit 2
    fi
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/trainyard-bench.XXXXXX")
server_pid=
cleanup() {
    if [[ -n $server_pid ]] && kill -0 "$server_pid" 2>/dev/null; then
        kill -TERM "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT

# The wrk script: POST /v1/jobs, a distinct name per request (BENCH_PREFIX-N),
# the same spec as bench_submit's, one key=value line at the end.
cat >"$tmp/submit.lua" <<'EOF'
local n = 0
function init(args)
  wrk.method = "POST"
  wrk.path = "/v1/jobs"
  wrk.headers["Content-Type"] = "application/json"
  wrk.headers["Authorization"] = "Bearer " .. os.getenv("BENCH_TOKEN")
  prefix = os.getenv("BENCH_PREFIX")
end
function request()
  n = n + 1
  return wrk.format(nil, nil, nil, string.format('{"name":"%s-%010d","labels":{"team":"bench",' ..
    '"shard":"s%d"},"image":"registry.example/trainyard-worker:1.0","command":["trainyard-worker",' ..
    '"train"],"args":["--epochs","5"],"workers":{"count":4}}', prefix, n, n % 10))
end
function done(summary, latency, requests)
  local e = summary.errors
  local bad = e.status + e.connect + e.read + e.write + e.timeout
  local secs = summary.duration / 1e6
  io.write(string.format("mode=wrk requests=%d errors=%d acked_jobs=%d jobs_per_s=%.1f " ..
    "p50_ms=%.3f p99_ms=%.3f max_ms=%.3f duration_s=%.2f\n", summary.requests, bad,
    summary.requests - e.status, (summary.requests - e.status) / secs,
    latency:percentile(50) / 1e3, latency:percentile(99) / 1e3, latency.max / 1e3, secs))
end
EOF

# ---- helpers -----------------------------------------------------------------

die() { echo "run_server_bench: $*" >&2; exit 1; }
# kv LINE KEY: the value of KEY in a key=value line.
kv() { sed -n "s/.* $2=\([^ ]*\).*/\1/p" <<<" $1"; }
# calc EXPR: floating-point arithmetic.
calc() { awk "BEGIN { printf \"%.6g\", ($1) }"; }
fmt() { awk -v v="$1" -v d="${2:-0}" 'BEGIN { printf "%.*f", d, v }'; }
# check VALUE OP LIMIT: "ok" or "MISSED".
check() { awk -v v="$1" -v l="$3" -v op="$2" 'BEGIN {
    ok = (op == ">=") ? (v >= l) : (v <= l); print ok ? "ok" : "MISSED" }'; }
clk_tck=$(getconf CLK_TCK)
# Server CPU seconds so far (user + system).
server_cpu() { awk -v t="$clk_tck" '{ print ($14 + $15) / t }' "/proc/$server_pid/stat"; }
status_kb() { awk -v k="$1:" '$1 == k { print $2 }' "/proc/$server_pid/status"; }
now() { date +%s.%N; }
# metric NAME: the sum of every sample of a /metrics family member (0 if absent).
metric() {
    curl -fsS "$url/metrics" 2>/dev/null |
        awk -v n="$1" '$1 == n || index($1, n "{") == 1 { s += $2 } END { printf "%.0f", s }'
}

# ---- the machine -------------------------------------------------------------

repo=$(cd "$(dirname "$0")/.." && pwd)
commit=$(git -C "$repo" describe --always --dirty 2>/dev/null || echo unknown)
cpu_model=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
echo "Trainyard server benchmark  $(date -u +%Y-%m-%dT%H:%M:%SZ)  commit $commit"
echo "machine: $(nproc) CPUs, $cpu_model, kernel $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "data dir: $tmp ($(df -P "$tmp" | awk 'NR == 2 { print $1 }'))"

# ---- the disk ----------------------------------------------------------------

fs=$("$fsyncb" --dir "$tmp" --duration 2)
fs_rate=$(kv "$fs" fsync_per_s)
fs_p50=$(kv "$fs" p50_ms)
fs_p99=$(kv "$fs" p99_ms)
fsa=$("$fsyncb" --dir "$tmp" --duration 1 --append)
echo "disk: 4 KiB write + fdatasync $(fmt "$fs_rate")/s (p50 $(fmt "$fs_p50" 3) ms, p99 $(fmt "$fs_p99" 3) ms);" \
     "appending $(fmt "$(kv "$fsa" fsync_per_s)")/s"

# ---- the server --------------------------------------------------------------

token=bench-admin-$RANDOM$RANDOM
# start_server DIR [ARGS...]: a fresh server on a fresh database in DIR; sets
# server_pid and url.
start_server() {
    local dir=$1 addr=
    shift
    mkdir -p "$dir/data"
    TRAINYARD_ADMIN_TOKEN=$token "$trainyard" serve --listen 127.0.0.1:0 \
        --db "$dir/data/trainyard.db" --log-level "$log_level" "$@" 2>"$dir/server.log" &
    server_pid=$!
    for _ in $(seq 100); do
        addr=$(sed -n 's/.*"msg":"listening".*"addr":"\([^"]*\)".*/\1/p' "$dir/server.log" | head -n1)
        [[ -n $addr ]] && break
        kill -0 "$server_pid" 2>/dev/null || break
        sleep 0.1
    done
    if [[ -z $addr ]]; then
        echo "run_server_bench: the server did not start; its log:" >&2
        cat "$dir/server.log" >&2
        exit 1
    fi
    url=http://$addr
}
stop_server() {
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=
}

stored=0  # jobs acknowledged so far (by this mode's server)
next=0    # number of the next job name for bench_submit
# client_cpu: CPU seconds of every child this shell has waited for.
client_cpu() { awk -v t="$clk_tck" '{ print ($16 + $17) / t }' "/proc/$$/stat"; }
# run_tool TOOL NAME SECONDS CONC [ARGS...]: one run of a load tool (wrk,
# submit, list); its key=value line in out, its CPU seconds in client_cpu_s.
run_tool() {
    local tool=$1 name=$2 secs=$3 conc=$4 cpu0
    shift 4
    cpu0=$(client_cpu)
    case $tool in
    wrk)
        out=$(BENCH_TOKEN=$token BENCH_PREFIX=$name wrk -t1 -c"$conc" -d"${secs}s" --timeout 10s \
              -s "$tmp/submit.lua" "$url" | grep '^mode=wrk') || true ;;
    submit)
        out=$("$submit" submit --url "$url" --token "$token" --prefix "$name" --first "$next" \
              -c "$conc" --duration "$secs" --warmup 0 "$@") || true
        [[ -z $out ]] || next=$(kv "$out" next_first) ;;
    list)
        out=$("$submit" list --url "$url" --token "$token" -c "$conc" --duration "$secs" \
              --warmup 0 "$@") || true ;;
    esac
    [[ -n $out ]] || die "the load tool ($tool) failed during $name"
    client_cpu_s=$(calc "$(client_cpu) - $cpu0")
    stored=$((stored + $(kv "$out" acked_jobs)))
    if [[ $(kv "$out" errors) != 0 ]]; then
        echo "  ($name: $(kv "$out" errors) failed requests; see stderr above)"
    fi
}
# load TOOL NAME SECONDS CONC [ARGS...]: a warm-up run, then the measured run
# with the server's CPU and store commits recorded around it. Sets res,
# srv_cpu_pct, srv_us_per_job, srv_ms_per_req, cli_cpu_pct, commits_per_s,
# ops_per_commit.
load() {
    local tool=$1 name=$2 secs=$3 conc=$4 c0 n0 s0 t0 t1 wall dn ds jobs reqs
    shift 4
    run_tool "$tool" "w$name" "$warmup" "$conc" "$@"
    c0=$(server_cpu); n0=$(metric trainyard_store_commit_batch_size_count)
    s0=$(metric trainyard_store_commit_batch_size_sum); t0=$(now)
    run_tool "$tool" "$name" "$secs" "$conc" "$@"
    res=$out
    t1=$(now)
    wall=$(calc "$t1 - $t0")
    jobs=$(kv "$res" acked_jobs)
    srv_cpu_pct=$(calc "100 * ($(server_cpu) - $c0) / $wall")
    reqs=$(kv "$res" requests)
    srv_us_per_job=$(calc "${jobs:-0} > 0 ? 1e6 * ($(server_cpu) - $c0) / $jobs : 0")
    srv_ms_per_req=$(calc "${reqs:-0} > 0 ? 1e3 * ($(server_cpu) - $c0) / $reqs : 0")
    cli_cpu_pct=$(calc "100 * $client_cpu_s / $wall")
    dn=$(calc "$(metric trainyard_store_commit_batch_size_count) - $n0")
    ds=$(calc "$(metric trainyard_store_commit_batch_size_sum) - $s0")
    commits_per_s=$(calc "$dn / $wall")
    ops_per_commit=$(calc "$dn > 0 ? $ds / $dn : 0")
}

# list_case LABEL [ARGS...]: one paging query (bench_submit list), one row;
# keeps the worst p99 in worst_list.
list_case() {
    local what=$1 p99
    shift
    load list list "$list_duration" 1 "$@"
    p99=$(kv "$res" p99_ms)
    worst_list=$(awk -v a="$worst_list" -v b="$p99" 'BEGIN { print (b > a) ? b : a }')
    printf '%-44s %8s %8s %8s %8s %9s  %s ms\n' "$what" "$(kv "$res" requests)" \
        "$(fmt "$(kv "$res" p50_ms)" 2)" "$(fmt "$p99" 2)" "$(fmt "$(kv "$res" max_ms)" 2)" \
        "$(fmt "$(kv "$res" jobs_per_page)" 1)" "$(fmt "$srv_ms_per_req" 2)"
}

# run_mode MODE: one mode (see the top) on its own server and database.
run_mode() {
    mode=$1
    local dir=$tmp/$mode launched0
    if [[ $mode == paused ]]; then
        label="admission paused"
        start_server "$dir" --queue-limit 0
    else
        label="jobs running"
        start_server "$dir" --stop-grace 1
    fi
    stored=0
    next=0
    launched0=$(metric trainyard_attempts_launched_total)
    echo "==== mode: $label ====  (load average $(cut -d' ' -f1-3 /proc/loadavg))"
    echo "server: pid $server_pid on ${url#http://}, log level $log_level$([[ $mode == paused ]] && echo ', --queue-limit 0')"
    echo
    # ---- durable single submissions ----------------------------------------------

    echo "== [$label] POST /v1/jobs, one job per request, ${duration} s each after ${warmup} s warm-up (${single_tool/submit/bench_submit}) =="
    printf '%-6s %10s %9s %9s %9s %11s %11s %8s  %s\n' conc "jobs/s" "p50 ms" "p99 ms" "max ms" \
        "commits/s" "jobs/commit" "/fsync" "CPU: server, load tool"
    for c in 1 8 64; do
        load "$single_tool" "s$c" "$duration" "$c"
        fig[$mode.$c.rate]=$(kv "$res" jobs_per_s)
        fig[$mode.$c.p50]=$(kv "$res" p50_ms)
        fig[$mode.$c.p99]=$(kv "$res" p99_ms)
        fig[$mode.$c.ratio]=$(calc "$commits_per_s / $fs_rate")
        fig[$mode.$c.cpu]=$srv_cpu_pct
        printf '%-6s %10s %9s %9s %9s %11s %11s %8s  %s%% (%s us/job), %s%%\n' "$c" \
            "$(fmt "${fig[$mode.$c.rate]}")" "$(fmt "${fig[$mode.$c.p50]}" 2)" "$(fmt "${fig[$mode.$c.p99]}" 2)" \
            "$(fmt "$(kv "$res" max_ms)" 1)" "$(fmt "$commits_per_s")" "$(fmt "$ops_per_commit" 1)" \
            "$(fmt "${fig[$mode.$c.ratio]}" 2)" "$(fmt "$srv_cpu_pct")" "$(fmt "$srv_us_per_job")" \
            "$(fmt "$cli_cpu_pct")"
    done
    echo

    # ---- :batch --------------------------------------------------------------------

    echo "== [$label] POST /v1/jobs:batch, 1000 jobs per request, ${batch_duration} s each =="
    printf '%-6s %10s %9s %9s %11s  %s\n' conc "jobs/s" "p50 ms" "p99 ms" "commits/s" \
        "CPU: server, load tool"
    fig[$mode.batch]=0
    for c in 1 2 4; do
        load submit "b$c" "$batch_duration" "$c" --batch 1000
        r=$(kv "$res" jobs_per_s)
        fig[$mode.batch]=$(awk -v a="${fig[$mode.batch]}" -v b="$r" 'BEGIN { print (b > a) ? b : a }')
        printf '%-6s %10s %9s %9s %11s  %s%% (%s us/job), %s%%\n' "$c" "$(fmt "$r")" \
            "$(fmt "$(kv "$res" p50_ms)" 1)" "$(fmt "$(kv "$res" p99_ms)" 1)" "$(fmt "$commits_per_s")" \
            "$(fmt "$srv_cpu_pct")" "$(fmt "$srv_us_per_job" 1)" "$(fmt "$cli_cpu_pct")"
    done
    rss_load=$(status_kb VmRSS)
    hwm_load=$(status_kb VmHWM)
    fig[$mode.launched]=$(calc "$(metric trainyard_attempts_launched_total) - $launched0")
    echo "attempts launched by the scheduler so far: ${fig[$mode.launched]}; jobs PENDING: $(metric 'trainyard_jobs{state="PENDING"}')"
    echo "server memory after the load: VmRSS $((rss_load / 1024)) MiB, VmHWM $((hwm_load / 1024)) MiB"
    echo

    if [[ $mode == running ]]; then
        stop_server
        return
    fi
    # ---- 1,000,000 jobs stored, then paging ----------------------------------------

    if ((fill > stored)); then
        t0=$(now)
        c0=$(server_cpu)
        f=$("$submit" submit --url "$url" --token "$token" --prefix fill --first "$next" \
            --batch 1000 -c 4 --jobs $((fill - stored))) || true
        [[ -n $f ]] || die "the load tool failed while filling"
        t1=$(now)
        next=$(kv "$f" next_first)
        stored=$((stored + $(kv "$f" acked_jobs)))
        [[ $(kv "$f" errors) == 0 ]] || echo "  (fill: $(kv "$f" errors) failed requests)"
        echo "filled to $stored jobs through :batch in $(fmt "$(calc "$t1 - $t0")" 1) s" \
             "($(fmt "$(kv "$f" jobs_per_s)") jobs/s, server CPU $(fmt "$(calc "100 * ($(server_cpu) - $c0) / ($t1 - $t0)")")%)"
    fi
    # Let the writer's background work after the burst (WAL checkpoints) finish:
    # the paging targets are about a store at rest.
    t0=$(now)
    for _ in $(seq 40); do
        c0=$(server_cpu)
        sleep 0.25
        (($(awk -v a="$c0" -v b="$(server_cpu)" 'BEGIN { print (b - a < 0.01) }'))) && break
    done
    db_mib=$(du -sm "$dir/data" | cut -f1)
    echo "database on disk: $db_mib MiB; server idle after $(fmt "$(calc "$(now) - $t0")" 1) s"

    echo "== [$label] GET /v1/jobs?limit=100 with $stored jobs stored, one client, ${list_duration} s each" \
         "(pages: how many were timed) =="
    printf '%-44s %8s %8s %8s %8s %9s  %s\n' query "pages" "p50 ms" "p99 ms" "max ms" "jobs/page" \
        "server CPU/page"
    worst_list=0
    list_case "newest page (no filter)"
    list_case "no filter, following 50 page tokens" --pages 50
    list_case "state=PENDING, following 50 page tokens" --query state=PENDING --pages 50
    list_case "label shard=s3 (1 in 10), following 20 pages" --query label=shard=s3 --pages 20
    list_case "state=RUNNING (matches none)" --query state=RUNNING
    rss_end=$(status_kb VmRSS)
    hwm_end=$(status_kb VmHWM)
    stored_end=$stored
    echo "server memory at the end: VmRSS $((rss_end / 1024)) MiB, VmHWM $((hwm_end / 1024)) MiB"
    echo
    stop_server
}

declare -A fig
for m in $modes; do
    run_mode "$m"
done

# ---- the report ------------------------------------------------------------------

c1_limit=$(calc "$fs_p50 + 1")
row() { printf '%-52s %-22s %-18s %s\n' "$@"; }
# The targets are about the API: judged on the paused mode when it ran.
t=running
[[ -n ${fig[paused.64.rate]:-} ]] && t=paused
[[ $t == paused ]] && tl="admission paused" || tl="jobs running"
echo "== targets ($tl) =="
row figure measured target verdict
row "durable single submissions/s, c=64" "$(fmt "${fig[$t.64.rate]}")" ">= 10000" \
    "$(check "${fig[$t.64.rate]}" ">=" 10000)"
row "p99 latency, c=64" "$(fmt "${fig[$t.64.p99]}" 2) ms" "<= 25 ms" "$(check "${fig[$t.64.p99]}" "<=" 25)"
row "jobs/s through :batch (best)" "$(fmt "${fig[$t.batch]}")" ">= 100000" \
    "$(check "${fig[$t.batch]}" ">=" 100000)"
row "p50 latency, c=1 (one fsync = $(fmt "$fs_p50" 3) ms)" "$(fmt "${fig[$t.1.p50]}" 3) ms" \
    "<= $(fmt "$c1_limit" 3) ms" "$(check "${fig[$t.1.p50]}" "<=" "$c1_limit")"
if [[ $t == paused ]]; then
    row "server RSS at the end, $stored_end jobs stored" "$((rss_end / 1024)) MiB" "<= 64 MiB" \
        "$(check "$rss_end" "<=" 65536)"
    row "server peak RSS (VmHWM) over the whole run" "$((hwm_end / 1024)) MiB" "<= 64 MiB" \
        "$(check "$hwm_end" "<=" 65536)"
    row "page of 100 jobs, worst p99 of the queries above" "$(fmt "$worst_list" 2) ms" "<= 5 ms" \
        "$(check "$worst_list" "<=" 5)"
fi
echo "ratios to the disk ($(fmt "$fs_rate") fdatasync/s, $tl):" \
     "store commits/s at c=1, 8, 64 = $(fmt "${fig[$t.1.ratio]}" 2), $(fmt "${fig[$t.8.ratio]}" 2), $(fmt "${fig[$t.64.ratio]}" 2) x the fsync rate;" \
     "jobs/s at c=64 = $(fmt "$(calc "${fig[$t.64.rate]} / $fs_rate")" 2) x; c=1 p50 = $(fmt "$(calc "${fig[$t.1.p50]} / $fs_p50")" 2) fsyncs"
if [[ -n ${fig[paused.64.rate]:-} && -n ${fig[running.64.rate]:-} ]]; then
    echo
    echo "== admission paused vs jobs running =="
    printf '%-44s %18s %18s\n' figure "admission paused" "jobs running"
    for c in 1 8 64; do
        printf '%-44s %18s %18s\n' "single submissions/s, c=$c" "$(fmt "${fig[paused.$c.rate]}")" \
            "$(fmt "${fig[running.$c.rate]}")"
        printf '%-44s %18s %18s\n' "p50 / p99 ms, c=$c" \
            "$(fmt "${fig[paused.$c.p50]}" 2) / $(fmt "${fig[paused.$c.p99]}" 2)" \
            "$(fmt "${fig[running.$c.p50]}" 2) / $(fmt "${fig[running.$c.p99]}" 2)"
        printf '%-44s %18s %18s\n' "server CPU, c=$c" "$(fmt "${fig[paused.$c.cpu]}")%" \
            "$(fmt "${fig[running.$c.cpu]}")%"
    done
    printf '%-44s %18s %18s\n' "jobs/s through :batch (best of c=1/2/4)" "$(fmt "${fig[paused.batch]}")" \
        "$(fmt "${fig[running.batch]}")"
    printf '%-44s %18s %18s\n' "attempts launched during the submissions" "${fig[paused.launched]}" \
        "${fig[running.launched]}"
fi
echo "whole run: ${SECONDS} s"
