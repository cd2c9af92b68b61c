#!/usr/bin/python3
"""PyTorch DistributedDataParallel baseline for trainyard-worker's default recipe.

Same model (784-512-512-10 MLP, ReLU, softmax cross-entropy, float32), same global batch
split over the ranks, same optimizer (AdamW with PyTorch's update rule, cosine schedule),
same data in memory (Fashion-MNIST idx files, normalised once), the gloo backend (NCCL with
--device cuda), and the same
thread setting: --threads BLAS/intra-op threads per rank (default: cores / ranks).

    python3 bench/pytorch_ddp_mlp.py --nproc 2 --steps 600 [--data DIR] [--device cpu|cuda]

Prints one JSON line from rank 0:
    {"impl":"pytorch-ddp","world":2,"batch":256,"steps":600,"samples_per_s":...,"step_ms":...}
The timed region is the training loop only (data loading, process start and the first
--warmup steps excluded), like trainyard-worker's samples_per_s.
"""
import argparse
import json
import math
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

# The idx reader of the PyTorch example (examples/pytorch-ddp/train.py): one parser of the files.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples",
                                "pytorch-ddp"))
from train import read_idx  # noqa: E402


def find(data_dir, split, kind, nd):
    for form in (f"{split}-{kind}-idx{nd}-ubyte.gz", f"{split}-{kind}-idx{nd}-ubyte",
                 f"{split}-{kind}.idx{nd}-ubyte.gz", f"{split}-{kind}.idx{nd}-ubyte"):
        path = os.path.join(data_dir, form)
        if os.path.exists(path):
            return path
    raise FileNotFoundError(f"{data_dir}: no {split}-{kind} file")


def shard(n, world, rank):
    """comm.h's rule: the first n % world shards get one element more."""
    q, r = divmod(n, world)
    return rank * q + min(rank, r), q + (1 if rank < r else 0)


def worker(rank, args, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    if args.bind:
        # Like trainyard-worker's --nproc launcher: rank r on its own slice of the cores.
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, cores[rank * args.threads:(rank + 1) * args.threads])
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo" if args.device == "cpu" else "nccl", rank=rank,
                            world_size=args.nproc)
    device = torch.device(args.device if args.device == "cpu" else f"cuda:{rank}")
    # float32 products, as trainyard-worker computes them (PyTorch's default, said aloud).
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    images = read_idx(find(args.data, "train", "images", 3))
    labels = read_idx(find(args.data, "train", "labels", 1)).long()
    x = images.reshape(images.shape[0], -1).float().div_(255.0)
    mean, std = x.mean(), x.std(unbiased=False)
    x = ((x - mean) / std).to(device)
    y = labels.to(device)
    n = x.shape[0]

    sizes = [x.shape[1]] + [int(h) for h in args.hidden.split(",")] + [10]
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i + 2 < len(sizes):
            layers.append(nn.ReLU())
    torch.manual_seed(args.seed)
    model = nn.Sequential(*layers).to(device)
    ddp = DDP(model, device_ids=None if args.device == "cpu" else [rank])
    opt = torch.optim.AdamW(ddp.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    steps_per_epoch = math.ceil(n / args.batch)
    planned = steps_per_epoch * args.epochs
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, planned) / planned)))
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(args.seed)

    step, t0, perm, pos = 0, None, None, n
    while step < args.steps + args.warmup:
        if pos >= n:
            perm = torch.randperm(n, generator=gen).to(device)
            pos = 0
        b = min(args.batch, n - pos)
        lo, cnt = shard(b, args.nproc, rank)
        idx = perm[pos + lo:pos + lo + cnt]
        out = ddp(x[idx])
        # DDP averages gradients over ranks, so the per-rank mean is the global mean
        # when the slices are equal (they are: the batch divides by the world size).
        loss = loss_fn(out, y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        pos += b
        step += 1
        if step == args.warmup:
            if args.device != "cpu":
                torch.cuda.synchronize()
            dist.barrier()
            t0 = time.perf_counter()
    if args.device != "cpu":
        torch.cuda.synchronize()
    dist.barrier()
    elapsed = time.perf_counter() - t0
    if rank == 0:
        print(json.dumps({
            "impl": "pytorch-ddp", "torch": torch.__version__, "world": args.nproc,
            "device": str(device), "threads": args.threads, "bind": args.bind,
            "batch": args.batch,
            "hidden": args.hidden, "steps": args.steps,
            "samples_per_s": round(args.steps * args.batch / elapsed, 1),
            "step_ms": round(1e3 * elapsed / args.steps, 3),
            "final_loss": round(loss.item(), 4)}), flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nproc", type=int, default=1)
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--hidden", default="512,512")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--weight-decay", type=float, default=0.05)
    p.add_argument("--epochs", type=int, default=15)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--bind", action="store_true",
                   help="pin each rank to its own cores (as trainyard-worker does)")
    p.add_argument("--data", default=os.environ.get("TRAINYARD_DATA_DIR",
                                                    "/usr/share/datasets/fashion-mnist"))
    args = p.parse_args()
    if args.threads <= 0:
        args.threads = max(1, len(os.sched_getaffinity(0)) // args.nproc)
    # The spawned ranks load OpenBLAS (through torch) with these: torch.set_num_threads()
    # alone leaves OpenBLAS's own thread pool at one thread per core.
    os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    # Without this, idle OpenMP threads spin and starve OpenBLAS's: 1 rank x 2 threads on 2
    # cores ran 15x slower here. It is the setting that makes PyTorch fastest.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(args, port), nprocs=args.nproc, join=True)


if __name__ == "__main__":
    sys.exit(main())
