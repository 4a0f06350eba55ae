"""A small model trained with DistributedDataParallel over a chosen backend;
prints the mean loss of every step (so two backends can be compared line by
line) and a checksum of the final weights.

    ./run.sh train_ddp.py                      # flagcx, CPU
    ./run.sh train_ddp.py --backend gloo       # the same run through gloo
    ./run.sh train_ddp.py --device cuda        # torch 2.x with CUDA
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import flagcx  # registers the backend "flagcx"

parser = argparse.ArgumentParser()
parser.add_argument("--backend", default="flagcx")
parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
parser.add_argument("--steps", type=int, default=20)
args = parser.parse_args()

rank, world = flagcx.env_from_mpi()
dev = torch.device("cpu")
if args.device == "cuda":
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())
    dev = torch.device("cuda", torch.cuda.current_device())
dist.init_process_group(args.backend, rank=rank, world_size=world)

torch.manual_seed(0)  # the same initial weights everywhere (DDP broadcasts them anyway)
net = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
                    nn.Linear(128, 1)).to(dev)
model = DDP(net)
opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)

# A regression task each rank samples its own share of: y = sum(sin(x)).
for step in range(args.steps):
    g = torch.Generator().manual_seed(step * world + rank)
    x = torch.randn(64, 32, generator=g)
    y = torch.sin(x).sum(dim=1, keepdim=True)
    x, y = x.to(dev), y.to(dev)
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    mean = loss.detach().clone()
    dist.all_reduce(mean)
    if rank == 0:
        print(f"step {step:3d}  loss {mean.item() / world:.6f}", flush=True)

checksum = sum(p.detach().double().sum().item() for p in net.parameters())
if rank == 0:
    print(f"backend {args.backend}: final weight checksum {checksum:.10f}")
dist.destroy_process_group()
