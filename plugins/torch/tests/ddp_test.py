"""20 DDP training steps through "flagcx" and through gloo, in the same
processes on the same data: the losses of every step and the final weights
must agree (relative difference < 1e-5).  Both the built-in gradient
allreduce and a communication hook (which goes through Work futures) are
trained.  --device cuda (torch 2.x with CUDA) trains on the rank's GPU
through flagcx and compares with the same training through gloo (which
stages CUDA tensors through the host).
"""
import argparse
import os
import datetime
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

import flagcx

STEPS = 20
parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
args = parser.parse_args()
rank, world = flagcx.env_from_mpi()
dev = torch.device("cpu")
if args.device == "cuda":
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())
    dev = torch.device("cuda", torch.cuda.current_device())
dist.init_process_group("flagcx", rank=rank, world_size=world,
                        timeout=datetime.timedelta(seconds=120))
gloo = dist.new_group(backend="gloo")
flagcx_group = dist.new_group(backend="flagcx")


def model():
    torch.manual_seed(1234)
    return nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(),
                         nn.Linear(64, 8))


def train(group, hook, device):
    # Small buckets: several allreduces per step, overlapping the backward.
    ddp = DDP(model().to(device), process_group=group, bucket_cap_mb=0.01)
    if hook:
        ddp.register_comm_hook(group, default_hooks.allreduce_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for step in range(STEPS):
        g = torch.Generator().manual_seed(1000 * step + rank)  # each rank its own data
        x = torch.randn(16, 32, generator=g).to(device)
        y = torch.randn(16, 8, generator=g).to(device)
        opt.zero_grad()
        loss = nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
        # The mean loss over ranks, through gloo for both runs.
        l = loss.detach().cpu()
        dist.all_reduce(l, group=gloo)
        losses.append(l.item() / world)
    weights = torch.cat([p.detach().cpu().flatten() for p in ddp.module.parameters()])
    return losses, weights


def rel(a, b):
    return (a - b).abs().max().item() / max(b.abs().max().item(), 1e-30)


bad = 0
for hook in (False, True):
    ref_losses, ref_w = train(gloo, hook, dev)  # gloo takes CUDA tensors too
    losses, w = train(flagcx_group, hook, dev)
    name = "allreduce_hook" if hook else "built-in allreduce"
    lr = rel(torch.tensor(losses), torch.tensor(ref_losses))
    wr = rel(w, ref_w)
    if rank == 0:
        print(f"{name}: step  flagcx loss  gloo loss")
        for i in (0, 1, STEPS // 2, STEPS - 1):
            print(f"  {i:4d}  {losses[i]:.8f}  {ref_losses[i]:.8f}")
        print(f"{name}: max relative difference: losses {lr:.2e}, final weights {wr:.2e}")
    if not lr < 1e-5 or not wr < 1e-5:
        print(f"rank {rank}: FAIL {name}: losses {lr:.2e}, weights {wr:.2e}", flush=True)
        bad += 1
    # The training must have done something: a loss that never moved, or
    # weights still at their start, would make the comparison empty.
    if not losses[-1] < losses[0] or rel(w, torch.cat([p.flatten() for p in model().parameters()])) < 1e-3:
        print(f"rank {rank}: FAIL {name}: the model did not train", flush=True)
        bad += 1
    # Every rank holds the same weights (flagcx kept the replicas in step).
    ws = [torch.empty_like(w) for _ in range(world)]
    dist.all_gather(ws, w, group=gloo)
    if any(not torch.equal(ws[0], x) for x in ws):
        print(f"rank {rank}: FAIL {name}: replicas differ", flush=True)
        bad += 1

dist.destroy_process_group()
sys.exit(1 if bad else 0)
