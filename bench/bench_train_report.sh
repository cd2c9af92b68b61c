#!/bin/sh
# bench_train_report.sh - what reporting metrics costs training: samples/s of the default
# recipe (784-512-512-10, AdamW, global batch 256, 2 ranks) with rank 0 reporting to a real
# `trainyard serve` on loopback, and without, in alternating runs of the same session
# (off/on, then on/off, ...), so that both see the same machine.
#
#   bench/bench_train_report.sh BUILD_DIR [STEPS] [PAIRS] [LOG_EVERY]
#
# BUILD_DIR holds bin/trainyard and bin/trainyard-worker. STEPS per run (default 1000),
# PAIRS of runs (default 3), LOG_EVERY the worker's --log-every (default 100, the recipe's:
# one point per 100 steps; 1 reports a point every step). The server runs on a temporary
# database with admission paused (--queue-limit 0); one job is submitted and the workers
# report for it with the admin token and TRAINYARD_REPORT_INTERVAL (default 5 s). Each run's
# samples/s is the worker's own "done" figure (training time, checkpoints excluded). The
# summary gives the median and the best of each side and their ratios; target: within 1 %.
set -eu

build=${1:?usage: bench_train_report.sh BUILD_DIR [STEPS] [PAIRS] [LOG_EVERY]}
steps=${2:-1000}
pairs=${3:-3}
log_every=${4:-100}
worker=$build/bin/trainyard-worker
server=$build/bin/trainyard
data=${TRAINYARD_DATA_DIR:-/usr/share/datasets/fashion-mnist}
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell}
tmp=$(mktemp -d)
pid=
cleanup() {
    if [ -n "$pid" ]; then
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

token="bench-report-$$-$(date +%s)"
mkdir -p "$tmp/data"
# Unset every TRAINYARD_* of the caller for the server; the workers get theirs below.
env -u TRAINYARD_SERVER -u TRAINYARD_TOKEN -u TRAINYARD_JOB_ID TRAINYARD_ADMIN_TOKEN="$token" \
    "$server" serve --listen 127.0.0.1:0 --db "$tmp/data/trainyard.db" --queue-limit 0 \
    2>"$tmp/server.log" >/dev/null &
pid=$!
addr=
i=0
while [ -z "$addr" ] && [ "$i" -lt 300 ]; do
    addr=$(grep '"listening"' "$tmp/server.log" 2>/dev/null |
        sed -n 's/.*"addr":"\([^"]*\)".*/\1/p' | head -1)
    [ -n "$addr" ] || sleep 0.1
    i=$((i + 1))
done
[ -n "$addr" ] || { echo "the server did not listen:" >&2; cat "$tmp/server.log" >&2; exit 1; }
url="http://$addr"
job=$(curl -sS --max-time 30 -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
    -d '{"name":"bench-report","image":"local","command":["true"],"workers":{"count":1}}' \
    "$url/v1/jobs" | grep -o '"id":"[^"]*"' | head -1 | cut -d'"' -f4)
[ -n "$job" ] || { echo "could not submit the job" >&2; exit 1; }

echo "# machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE; default recipe, 2 ranks, $steps steps per run, --log-every $log_every, $pairs pairs"
echo "# server $url, job $job, TRAINYARD_REPORT_INTERVAL=${TRAINYARD_REPORT_INTERVAL:-5}"

# run SIDE N: one training run, reporting (on) or not (off); appends samples/s to $tmp/SIDE
run() {
    if [ "$1" = on ]; then
        env TRAINYARD_SERVER="$url" TRAINYARD_TOKEN="$token" TRAINYARD_JOB_ID="$job" \
            "$worker" train --data "$data" --nproc 2 --max-steps "$steps" \
            --log-every "$log_every" >"$tmp/out" 2>"$tmp/err"
    else
        env -u TRAINYARD_SERVER -u TRAINYARD_TOKEN -u TRAINYARD_JOB_ID \
            "$worker" train --data "$data" --nproc 2 --max-steps "$steps" \
            --log-every "$log_every" >"$tmp/out" 2>"$tmp/err"
    fi
    sps=$(grep '"event":"done"' "$tmp/out" | grep -o '"samples_per_s":[0-9.e+]*' | cut -d: -f2)
    [ -n "$sps" ] || { echo "run $1 $2 failed:" >&2; cat "$tmp/err" >&2; exit 1; }
    echo "$sps" >> "$tmp/$1"
    rep=$(grep -o 'reporting: .*' "$tmp/err" || echo "reporting: off")
    printf '%-4s run %d: %10.0f samples/s   %s\n' "$1" "$2" "$sps" "$rep"
}

: > "$tmp/on"
: > "$tmp/off"
p=1
while [ "$p" -le "$pairs" ]; do
    if [ $((p % 2)) -eq 1 ]; then run off "$p"; run on "$p"; else run on "$p"; run off "$p"; fi
    p=$((p + 1))
done

median() { sort -g "$1" | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
best() { sort -g "$1" | tail -1; }
mon=$(median "$tmp/on"); moff=$(median "$tmp/off"); bon=$(best "$tmp/on"); boff=$(best "$tmp/off")
curl -sS --max-time 30 -H "Authorization: Bearer $token" \
    "$url/v1/jobs/$job/metrics?name=loss&max_points=2" |
    grep -o '"total_points":[0-9]*' | sed 's/^/# stored for the job: loss /'
echo
echo "| reporting | median samples/s | best samples/s |"
echo "| --- | --- | --- |"
printf '| off | %.0f | %.0f |\n' "$moff" "$boff"
printf '| on | %.0f | %.0f |\n' "$mon" "$bon"
awk -v a="$mon" -v b="$moff" -v c="$bon" -v d="$boff" 'BEGIN {
    printf "on/off: median %.4f (%+.2f %%), best %.4f (%+.2f %%); target: within 1 %%\n",
        a / b, 100 * (a / b - 1), c / d, 100 * (c / d - 1) }'
