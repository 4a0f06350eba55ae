"""torch.distributed.all_reduce through "flagcx" against another backend in
the same run (same processes, same tensors, alternating rounds so that load
from elsewhere hits both alike).

    ./run.sh bench_allreduce.py                           # CPU: flagcx vs gloo, 1 MiB..256 MiB
    ./run.sh bench_allreduce.py --device cuda --compare nccl   # GPU (torch 2.x)

Per size: one buffer per backend, `--warmup` calls, then `--iters` timed
calls in each of `--rounds` alternating rounds; the time is the slowest rank's average per call; busbw = bytes/time
x 2(n-1)/n.  Every result is checked (a wrong sum exits non-zero).
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist

import flagcx


def size_arg(s):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(s[:-1]) * units[s[-1].upper()]) if s[-1].upper() in units else int(s)


parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
parser.add_argument("--compare", default=None, help="gloo (CPU default) or nccl (GPU default)")
parser.add_argument("-b", "--min-bytes", type=size_arg, default=size_arg("1M"))
parser.add_argument("-e", "--max-bytes", type=size_arg, default=size_arg("256M"))
parser.add_argument("-f", "--factor", type=int, default=4)
parser.add_argument("--iters", type=int, default=5)
parser.add_argument("--warmup", type=int, default=2)
parser.add_argument("--rounds", type=int, default=2)
args = parser.parse_args()

rank, world = flagcx.env_from_mpi()
dev = torch.device("cpu")
if args.device == "cuda":
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())
    dev = torch.device("cuda", torch.cuda.current_device())
other_name = args.compare or ("nccl" if args.device == "cuda" else "gloo")
dist.init_process_group("flagcx", rank=rank, world_size=world)
groups = {"flagcx": dist.group.WORLD, other_name: dist.new_group(backend=other_name)}
meta = dist.new_group(backend="gloo")  # for the timing results


def sync():
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def timed(group, t, n):
    """Average seconds per all_reduce over n calls (slowest rank)."""
    dist.barrier(group=meta)
    sync()
    start = time.perf_counter()
    for _ in range(n):
        dist.all_reduce(t, group=group)
    sync()
    took = torch.tensor([(time.perf_counter() - start) / n], dtype=torch.float64)
    dist.all_reduce(took, op=dist.ReduceOp.MAX, group=meta)
    return took.item()


busfactor = 2 * (world - 1) / world if world > 1 else 1.0
load = os.getloadavg()[0]
if rank == 0:
    print(f"# all_reduce float32 sum, {world} ranks, {args.device} tensors, flagcx {flagcx.__version__} "
          f"({flagcx.device()}) vs {other_name}, torch {torch.__version__}")
    print(f"# {args.iters} calls x {args.rounds} alternating rounds per size after {args.warmup} warm-up; "
          f"time = slowest rank's average; load average at start {load:.1f} on {os.cpu_count()} CPUs")
    print(f"{'bytes':>12} {'flagcx(us)':>12} {'busbw(GB/s)':>12} {other_name + '(us)':>12} "
          f"{'busbw(GB/s)':>12} {'ratio':>7}")
bad = 0
size = args.min_bytes
while size <= args.max_bytes:
    n = size // 4
    best = {}
    bufs = {}
    for name, group in groups.items():
        # One buffer per backend and size, warmed up and reused (as
        # nccl-tests does): first use of a new buffer may cost set-up.
        t = bufs[name] = torch.ones(n, dtype=torch.float32, device=dev)
        for _ in range(args.warmup):
            dist.all_reduce(t, group=group)
        best[name] = []
    for _ in range(args.rounds):
        for name, group in groups.items():
            t = bufs[name].fill_(1.0)
            best[name].append(timed(group, t, args.iters))
            # ones summed `iters` times over `world` ranks: exact in float32 for small counts
            want = float(world) ** args.iters
            if not bool((t == want).all()):
                print(f"rank {rank}: WRONG result of {name} at {size} bytes", flush=True)
                bad += 1
    f = min(best["flagcx"])
    o = min(best[other_name])
    if rank == 0:
        print(f"{size:>12} {f * 1e6:>12.1f} {size / f * busfactor / 1e9:>12.3f} {o * 1e6:>12.1f} "
              f"{size / o * busfactor / 1e9:>12.3f} {o / f:>7.2f}", flush=True)
    size *= args.factor
if rank == 0:
    print("# ratio = other time / flagcx time (>1: flagcx faster); each time is the best round's")
    print(f"# load average at end {os.getloadavg()[0]:.1f}")
dist.destroy_process_group()
sys.exit(1 if bad else 0)
