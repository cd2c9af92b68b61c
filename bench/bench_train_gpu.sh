#!/bin/sh
# bench_train_gpu.sh - trainyard-worker --device cuda beside PyTorch on the same GPU.
#
#   bench/bench_train_gpu.sh BUILD_DIR [STEPS]
#
# Two models at global batch 4096: the default MLP (784-512-512-10) and a large one
# (784-8192-8192-10), one rank on GPU 0, AdamW, float32 (no TF32) on both sides.
# Reports samples/s and the step time of each. BUILD_DIR must have been configured with
# the CUDA path (TRAINYARD_CUDA=AUTO or ON on a machine with nvcc, cuBLAS and NCCL).
set -eu

build=${1:?usage: bench_train_gpu.sh BUILD_DIR [STEPS]}
steps=${2:-300}
here=$(cd "$(dirname "$0")" && pwd)
# Debian's python3-torch lives in the system interpreter, not in a virtualenv's.
python=${PYTHON:-python3}
if [ -z "${PYTHON:-}" ] && [ -x /usr/bin/python3 ]; then python=/usr/bin/python3; fi
worker=$build/bin/trainyard-worker
data=${TRAINYARD_DATA_DIR:-/usr/share/datasets/fashion-mnist}

nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null || true
echo "| model | trainyard-worker samples/s | step ms | PyTorch samples/s | step ms |"
echo "| --- | --- | --- | --- | --- |"
for hidden in 512,512 8192,8192; do
    ty=$("$worker" train --device cuda --data "$data" --batch 4096 --hidden "$hidden" \
        --max-steps "$steps" --log-every 100000 | grep '"event":"done"')
    ty_sps=$(echo "$ty" | grep -o '"samples_per_s":[0-9.]*' | cut -d: -f2)
    ty_ms=$(awk -v s="$ty_sps" 'BEGIN { printf "%.3f", 4096 * 1000 / s }')
    if "$python" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
        pt=$("$python" "$here/pytorch_ddp_mlp.py" --device cuda --nproc 1 --data "$data" \
            --batch 4096 --hidden "$hidden" --steps "$steps")
        pt_sps=$(echo "$pt" | grep -o '"samples_per_s": [0-9.]*' | cut -d' ' -f2)
        pt_ms=$(echo "$pt" | grep -o '"step_ms": [0-9.]*' | cut -d' ' -f2)
    else
        pt_sps="(no CUDA torch)"
        pt_ms="-"
    fi
    echo "| 784-$hidden-10 | $ty_sps | $ty_ms | $pt_sps | $pt_ms |"
done
