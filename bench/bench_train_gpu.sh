#!/bin/sh
# bench_train_gpu.sh - trainyard-worker --device cuda beside PyTorch on the same GPU.
#
#   bench/bench_train_gpu.sh BUILD_DIR [STEPS]
#
# Two models at global batch 4096: the default MLP (784-512-512-10) and a large one
# (784-8192-8192-10), one rank on GPU 0, AdamW, float32 (no TF32) on both sides.
# Reports samples/s and the step time of each, the matrix work of a step as TFLOP/s, and
# the ceiling: cuBLAS's own float32 GEMM rate at the large model's biggest shape, measured
# in the same run (through PyTorch, which calls cuBLAS). BUILD_DIR must have been
# configured with the CUDA path (TRAINYARD_CUDA=AUTO or ON with nvcc, cuBLAS and NCCL).
set -eu

build=${1:?usage: bench_train_gpu.sh BUILD_DIR [STEPS]}
steps=${2:-300}
here=$(cd "$(dirname "$0")" && pwd)
worker=$build/bin/trainyard-worker
data=${TRAINYARD_DATA_DIR:-/usr/share/datasets/fashion-mnist}

# The first interpreter whose torch sees a GPU: $PYTHON, then python3 on the PATH (a
# virtualenv's), then Debian's.
python=
for p in ${PYTHON:-} python3 /usr/bin/python3; do
    if "$p" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
        python=$p
        break
    fi
done

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true
if [ -n "$python" ]; then
    ceiling=$("$python" - <<'PY'
import torch
torch.backends.cuda.matmul.allow_tf32 = False
a = torch.randn(4096, 8192, device="cuda")
b = torch.randn(8192, 8192, device="cuda")
for _ in range(3):
    a @ b
torch.cuda.synchronize()
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
s.record()
for _ in range(20):
    a @ b
e.record()
torch.cuda.synchronize()
print("%.1f" % (2 * 4096 * 8192 * 8192 * 20 / (s.elapsed_time(e) / 1e3) / 1e12))
PY
)
    echo "cuBLAS float32 GEMM 4096x8192x8192 (through PyTorch $("$python" -c 'import torch; print(torch.__version__)')): $ceiling TFLOP/s"
else
    ceiling=
    echo "no PyTorch with CUDA: no baseline and no GEMM ceiling"
fi
echo "| model | trainyard-worker samples/s | step ms | GEMM TFLOP/s | PyTorch samples/s | step ms | ratio |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for hidden in 512,512 8192,8192; do
    # Epochs enough that --max-steps ends the run (an epoch is 15 steps at this batch; the
    # default 15 epochs would stop it at 225).
    ty=$("$worker" train --device cuda --data "$data" --batch 4096 --hidden "$hidden" \
        --epochs 1000 --max-steps "$steps" --log-every 100000 | grep '"event":"done"')
    ty_sps=$(echo "$ty" | grep -o '"samples_per_s":[0-9.]*' | cut -d: -f2)
    ty_ms=$(awk -v s="$ty_sps" 'BEGIN { printf "%.3f", 4096 * 1000 / s }')
    # Forward, and backward's two products per layer: 6 * batch * weights.
    tflops=$(echo "$hidden" | awk -F, -v s="$ty_sps" '{
        w = 784 * $1; for (i = 2; i <= NF; i++) w += $(i-1) * $i; w += $NF * 10
        printf "%.1f", 6 * w * s / 1e12 }')
    if [ -n "$python" ]; then
        pt=$("$python" "$here/pytorch_ddp_mlp.py" --device cuda --nproc 1 --data "$data" \
            --batch 4096 --hidden "$hidden" --steps "$steps")
        pt_sps=$(echo "$pt" | grep -o '"samples_per_s": [0-9.]*' | cut -d' ' -f2)
        pt_ms=$(echo "$pt" | grep -o '"step_ms": [0-9.]*' | cut -d' ' -f2)
        ratio=$(awk -v a="$ty_sps" -v b="$pt_sps" 'BEGIN { printf "%.2fx", a / b }')
    else
        pt_sps="-"
        pt_ms="-"
        ratio="-"
    fi
    echo "| 784-$hidden-10 | $ty_sps | $ty_ms | $tflops | $pt_sps | $pt_ms | $ratio |"
done
