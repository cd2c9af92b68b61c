#!/usr/bin/python3
"""Fashion-MNIST with PyTorch DistributedDataParallel, as a Trainyard job.

Runs unchanged under Trainyard (local backend or Kubernetes), under torchrun, or alone:

    python3 train.py [--data DIR] [--subset N] [--epochs E] [--checkpoint-every S]

- The rank's place comes from RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and LOCAL_RANK, as
  torchrun and both Trainyard backends set them (alone: one rank on a free loopback port).
- gloo on CPU, NCCL when CUDA is available (one GPU per rank: cuda:LOCAL_RANK).
- The data: the idx files of Debian's dataset-fashion-mnist (no torchvision): --data, else
  $TRAINYARD_DATA_DIR (or its fashion-mnist/), else /usr/share/datasets/fashion-mnist.
  A DistributedSampler gives each rank its disjoint share of every epoch.
- Checkpoints: rank 0 writes $TRAINYARD_CHECKPOINT_DIR/ckpt-<step>.pt every --checkpoint-every
  steps, at the end, and when stopped (temporary file, fsync, rename: a crash leaves the previous
  one whole); a start resumes from the newest that loads (the model, the optimizer, the epoch
  and the position in it), sent from rank 0 to every rank.
- SIGTERM (the backend stopping the gang, a preemption): every step the ranks vote on whether
  one of them was asked to stop; after the step where one was, all write a checkpoint (rank 0)
  and exit 75, which the backends read as "stopped, resumable".
- Metrics: rank 0 reports its batch loss every --report-every steps and the test accuracy at
  the end with trainyard.report (a no-op outside a job).
"""

import argparse
import datetime
import gzip
import os
import re
import signal
import socket
import struct
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DistributedSampler

try:
    import trainyard
    report = trainyard.report
except ImportError:            # the example also runs where the client is not installed
    def report(step, **values):
        pass

EXIT_STOPPED = 75              # EX_TEMPFAIL: stopped after a checkpoint, resumable
DEBIAN_DATA = "/usr/share/datasets/fashion-mnist"
CKPT = re.compile(r"ckpt-(\d{9,})\.pt\Z")

_stop_asked = False


def on_sigterm(signum, frame):
    global _stop_asked
    _stop_asked = True


def log(*a):
    print(*a, flush=True)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", help="directory of the Fashion-MNIST idx files")
    p.add_argument("--subset", type=int, default=0,
                   help="train on the first N images only (0: all 60,000)")
    p.add_argument("--test-subset", type=int, default=0,
                   help="test on the first N test images only (0: all 10,000)")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch", type=int, default=64, help="images per rank per step")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--checkpoint-every", type=int, default=200, help="steps (0: never)")
    p.add_argument("--checkpoint-dir", default=os.environ.get("TRAINYARD_CHECKPOINT_DIR"))
    p.add_argument("--output-dir", default=os.environ.get("TRAINYARD_OUTPUT_DIR"))
    p.add_argument("--report-every", type=int, default=10, help="steps between loss points")
    p.add_argument("--no-report", action="store_true", help="report nothing (for comparison)")
    p.add_argument("--log-every", type=int, default=100)
    p.add_argument("--max-steps", type=int, default=0, help="stop after this step (0: none)")
    p.add_argument("--threads", type=int, default=0,
                   help="intra-op threads per rank (0: the CPUs this process may use / ranks)")
    p.add_argument("--timeout", type=int, default=300, help="seconds a collective may wait")
    a = p.parse_args(argv)
    if a.batch < 1 or a.epochs < 1 or a.subset < 0 or a.test_subset < 0:
        p.error("--batch and --epochs must be positive, subsets not negative")
    return a


# -- data ----------------------------------------------------------------------------------

def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    zero, dtype, ndims = struct.unpack(">HBB", raw[:4])
    if zero != 0 or dtype != 0x08:
        raise ValueError(f"{path}: not an idx file of unsigned bytes")
    dims = struct.unpack(">" + "I" * ndims, raw[4:4 + 4 * ndims])
    data = torch.frombuffer(bytearray(raw[4 + 4 * ndims:]), dtype=torch.uint8)
    return data.reshape(dims)


def data_dir(flag):
    """The first directory that holds train-images-idx3-ubyte[.gz]."""
    if flag:
        tried = [flag]
    else:
        env = os.environ.get("TRAINYARD_DATA_DIR")
        tried = ([env, os.path.join(env, "fashion-mnist")] if env else []) + [DEBIAN_DATA]
    for d in tried:
        for name in ("train-images-idx3-ubyte.gz", "train-images-idx3-ubyte"):
            if os.path.exists(os.path.join(d, name)):
                return d
    sys.exit("train.py: no train-images-idx3-ubyte[.gz] in " + ", ".join(tried) +
             " (install Debian's dataset-fashion-mnist, or pass --data DIR)")


def load(d, split, limit):
    def find(kind, nd):
        for name in (f"{split}-{kind}-idx{nd}-ubyte.gz", f"{split}-{kind}-idx{nd}-ubyte"):
            path = os.path.join(d, name)
            if os.path.exists(path):
                return path
        sys.exit(f"train.py: {d}: no {split}-{kind}-idx{nd}-ubyte[.gz]")
    x = read_idx(find("images", 3))
    y = read_idx(find("labels", 1))
    if limit:
        x, y = x[:limit], y[:limit]
    x = x.reshape(x.shape[0], -1).float().div_(255.0)
    return (x - 0.2860) / 0.3530, y.long()    # Fashion-MNIST's training mean and deviation


# -- model ---------------------------------------------------------------------------------

class MLP(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.fc1 = nn.Linear(784, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, 10)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


# -- checkpoints ---------------------------------------------------------------------------

def fsync_dir(d):
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_atomic(obj, path):
    """obj to path through a temporary file, fsync and rename: path is whole or absent."""
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    fsync_dir(os.path.dirname(path) or ".")


def checkpoints(d):
    """(step, path) of the checkpoints in d, newest first."""
    if not d or not os.path.isdir(d):
        return []
    found = []
    for name in os.listdir(d):
        m = CKPT.match(name)
        if m:
            found.append((int(m.group(1)), os.path.join(d, name)))
    return sorted(found, reverse=True)


def save_checkpoint(args, state):
    """Rank 0: writes ckpt-<step>.pt and keeps the newest two."""
    if not args.checkpoint_dir:
        return
    os.makedirs(args.checkpoint_dir, exist_ok=True)
    save_atomic(state, os.path.join(args.checkpoint_dir, f"ckpt-{state['step']:09d}.pt"))
    for _, old in checkpoints(args.checkpoint_dir)[2:]:
        try:
            os.unlink(old)
        except OSError:
            pass


def newest_checkpoint(args):
    """Rank 0: the newest checkpoint that loads, or None."""
    for step, path in checkpoints(args.checkpoint_dir):
        try:
            return torch.load(path, map_location="cpu")
        except Exception as e:    # noqa: BLE001 - a damaged file: try the one before
            log(f"train.py: {path}: cannot be loaded ({e}); trying an older checkpoint")
    return None


# -- the run -------------------------------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_distributed(args):
    """(rank, world, local_rank, device), the process group started."""
    if "RANK" not in os.environ:          # alone: a world of one on loopback
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(free_port()))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if torch.cuda.is_available():
        backend = "nccl"
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        backend = "gloo"
        device = torch.device("cpu")
        # Ranks on one machine share its CPUs rather than each take them all.
        threads = args.threads or max(1, len(os.sched_getaffinity(0)) // max(1, local_world))
        torch.set_num_threads(threads)
    dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=args.timeout))
    return rank, world, local_rank, device


def stop_voted(device):
    """True on every rank when any rank was asked to stop (SIGTERM) before this step."""
    flag = torch.tensor([1.0 if _stop_asked else 0.0], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return flag.item() > 0.5


@torch.no_grad()
def accuracy(model, x, y, device):
    model.eval()
    right = 0
    for i in range(0, x.shape[0], 1000):
        out = model(x[i:i + 1000].to(device))
        right += (out.argmax(1).cpu() == y[i:i + 1000]).sum().item()
    model.train()
    return right / max(1, x.shape[0])


def main(argv=None):
    signal.signal(signal.SIGTERM, on_sigterm)
    args = parse_args(sys.argv[1:] if argv is None else argv)
    rank, world, local_rank, device = init_distributed(args)
    d = data_dir(args.data)
    x, y = load(d, "train", args.subset)
    torch.manual_seed(args.seed)
    model = MLP(args.hidden).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    sampler = DistributedSampler(range(x.shape[0]), num_replicas=world, rank=rank, shuffle=True,
                                 seed=args.seed, drop_last=True)
    per_epoch = len(sampler) // args.batch
    if per_epoch == 0:
        sys.exit(f"train.py: {x.shape[0]} images make no batch of {args.batch} on {world} ranks")
    total = per_epoch * args.epochs
    if args.max_steps:
        total = min(total, args.max_steps)

    # Resume: rank 0 finds the newest checkpoint and sends it to every rank.
    box = [newest_checkpoint(args) if rank == 0 else None]
    if world > 1:
        dist.broadcast_object_list(box, src=0)
    ckpt = box[0]
    step, epoch, pos = 0, 0, 0
    if ckpt is not None:
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizer"])
        step, epoch, pos = ckpt["step"], ckpt["epoch"], ckpt["position"]
        if rank == 0:
            log(f"resumed from checkpoint step {step} (epoch {epoch}, batch {pos})")
    del box, ckpt
    ddp = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
    if rank == 0:
        log(f"training: {world} ranks ({dist.get_backend()}), {x.shape[0]} images from {d}, "
            f"{per_epoch} steps per epoch, {total} steps, from step {step}")

    def state():
        return {"step": step, "epoch": epoch, "position": pos, "model": model.state_dict(),
                "optimizer": opt.state_dict(), "world_size": world}

    reporting = not args.no_report
    t0, s0 = time.monotonic(), step
    while step < total:
        sampler.set_epoch(epoch)
        order = torch.tensor(list(iter(sampler)), dtype=torch.long)
        while pos < per_epoch and step < total:
            if stop_voted(device):
                if rank == 0:
                    save_checkpoint(args, state())
                    log(f"stopped at step {step}: checkpoint written, exiting {EXIT_STOPPED}")
                sys.exit(EXIT_STOPPED)
            idx = order[pos * args.batch:(pos + 1) * args.batch]
            xb, yb = x[idx].to(device, non_blocking=True), y[idx].to(device, non_blocking=True)
            loss = F.cross_entropy(ddp(xb), yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            pos += 1
            if rank == 0:
                if reporting and step % args.report_every == 0:
                    report(step, loss=loss.item())
                if step % args.log_every == 0:
                    log(f"step {step} epoch {epoch} loss {loss.item():.4f}")
            if pos == per_epoch:
                epoch, pos = epoch + 1, 0
            if args.checkpoint_every and step % args.checkpoint_every == 0 and rank == 0:
                save_checkpoint(args, state())
    elapsed = time.monotonic() - t0

    if rank == 0:
        save_checkpoint(args, state())
        tx, ty = load(d, "t10k", args.test_subset)
        acc = accuracy(model, tx, ty, device)
        if reporting:
            report(step, accuracy=acc)
        if args.output_dir:
            os.makedirs(args.output_dir, exist_ok=True)
            save_atomic(model.state_dict(), os.path.join(args.output_dir, "model.pt"))
        rate = (step - s0) * args.batch * world / elapsed if elapsed > 0 and step > s0 else 0
        log(f"done: {step} steps, test accuracy {acc:.4f}, {rate:.0f} samples/s")
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
