#!/bin/sh
# bench_train.sh - training throughput of trainyard-worker beside PyTorch DDP (gloo), on
# the default recipe (784-512-512-10 MLP, AdamW, global batch 256), at 1 and 2 ranks, with
# the machine's sgemm rate measured in the same run.
#
#   bench/bench_train.sh BUILD_DIR [STEPS] [REPEATS]
#
# BUILD_DIR holds bin/trainyard-worker and bench/bench_sgemm. Both trainers get the
# same OpenBLAS kernel (OPENBLAS_CORETYPE, Haswell unless set) and threads per rank
# (cores / ranks); the best of REPEATS runs (default 3) is reported, since other load on
# the machine only ever slows a run down. Needs python3-torch for the PyTorch side
# (skipped without it). Output: one line per measurement, then a summary table.
set -eu

build=${1:?usage: bench_train.sh BUILD_DIR [STEPS] [REPEATS]}
steps=${2:-600}
repeats=${3:-3}
here=$(cd "$(dirname "$0")" && pwd)
# Debian's python3-torch lives in the system interpreter, not in a virtualenv's.
python=${PYTHON:-python3}
if [ -z "${PYTHON:-}" ] && [ -x /usr/bin/python3 ]; then python=/usr/bin/python3; fi
worker=$build/bin/trainyard-worker
sgemm=$build/bench/bench_sgemm
data=${TRAINYARD_DATA_DIR:-/usr/share/datasets/fashion-mnist}
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell}
cores=$(nproc)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

echo "# machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $cores cores"
echo "# OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE, $steps steps per run, best of $repeats"
"$sgemm" --threads 1 --batch 128
"$sgemm" --threads "$cores" --batch 256

# best VALUE among lines of FILE matching "key":VALUE or "key": VALUE
best() {
    grep -o "\"$2\": *[0-9.]*" "$1" | sed 's/.*: *//' | sort -g | tail -1
}

have_torch=0
if "$python" -c 'import torch' 2>/dev/null; then have_torch=1; fi

# trainyard-worker's launcher pins each rank to its own cores (--bind cores, the default);
# PyTorch DDP runs both as it does by default and pinned the same way (--bind).
for world in 1 2; do
    : > "$tmp/ty$world"
    : > "$tmp/pt$world"
    : > "$tmp/ptb$world"
    i=0
    while [ "$i" -lt "$repeats" ]; do
        "$worker" train --data "$data" --nproc "$world" --max-steps "$steps" \
            --log-every 100000 | grep '"event":"done"' | tee -a "$tmp/ty$world"
        if [ "$have_torch" = 1 ]; then
            "$python" "$here/pytorch_ddp_mlp.py" --data "$data" --nproc "$world" \
                --steps "$steps" | tee -a "$tmp/pt$world"
            if [ "$world" -gt 1 ]; then
                "$python" "$here/pytorch_ddp_mlp.py" --data "$data" --nproc "$world" \
                    --steps "$steps" --bind | tee -a "$tmp/ptb$world"
            fi
        fi
        i=$((i + 1))
    done
done

echo
echo "| ranks | trainyard-worker samples/s | PyTorch DDP samples/s | PyTorch DDP pinned | ratio to the faster |"
echo "| --- | --- | --- | --- | --- |"
for world in 1 2; do
    ty=$(best "$tmp/ty$world" samples_per_s)
    if [ "$have_torch" = 1 ]; then
        pt=$(best "$tmp/pt$world" samples_per_s)
        ptb=$(best "$tmp/ptb$world" samples_per_s)
        [ -n "$ptb" ] || ptb=$pt
        ratio=$(awk -v a="$ty" -v b="$pt" -v c="$ptb" \
            'BEGIN { if (c > b) b = c; printf "%.2f", a / b }')
        pt=$(printf '%.0f' "$pt")
        ptb=$(printf '%.0f' "$ptb")
    else
        pt="(no torch)"
        ptb="-"
        ratio="-"
    fi
    echo "| $world | $(printf '%.0f' "$ty") | $pt | $ptb | $ratio |"
done
