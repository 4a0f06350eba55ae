#!/usr/bin/env python3
"""A small DDP training run whose losses can be compared across NCCL builds.

usage: ddp_losses.py WORLD_SIZE BACKEND OUT.json [STEPS]

Spawns WORLD_SIZE processes on this host, all on cuda:0 unless there are
enough GPUs (rank r -> cuda:r % count), trains a fixed MLP on fixed data with
torch.nn.parallel.DistributedDataParallel (BACKEND: nccl or gloo), and writes
rank 0's per-step losses to OUT.json.  Everything is seeded, so two runs that
differ only in the NCCL library must print the same losses.  Run it with
LD_PRELOAD=<drop-in>/libnccl.so.2 to put flagcx under torch's NCCL backend.
"""
import json
import os
import sys


def worker(rank, world, backend, out, steps, port):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dev = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    dist.init_process_group(backend, rank=rank, world_size=world)
    torch.manual_seed(1234)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 10)).to(dev)
    ddp = DDP(model, device_ids=[dev.index] if backend == "nccl" else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(99 + rank)  # each rank its own shard
    losses = []
    for step in range(steps):
        x = torch.randn(32, 64, generator=g).to(dev)
        y = torch.randint(0, 10, (32,), generator=g).to(dev)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
        # The mean loss over ranks, through the backend as well.
        t = loss.detach().clone()
        dist.all_reduce(t)
        losses.append(t.item() / world)
    # The parameters after training: identical on every rank under DDP.
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = [torch.zeros_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    same = all(torch.equal(gathered[0], t) for t in gathered)
    torch.cuda.synchronize()
    dist.destroy_process_group()
    if rank == 0:
        with open(out, "w") as f:
            json.dump({"world": world, "backend": backend, "losses": losses,
                       "params_equal_across_ranks": same,
                       "nccl_version": list(torch.cuda.nccl.version())}, f)


def main():
    if len(sys.argv) < 4:
        print(__doc__)
        return 2
    world, backend, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    steps = int(sys.argv[4]) if len(sys.argv) > 4 else 30
    import torch.multiprocessing as mp
    port = 29500 + os.getpid() % 1000
    mp.spawn(worker, args=(world, backend, out, steps, port), nprocs=world, join=True)
    print(open(out).read())
    return 0


if __name__ == "__main__":
    sys.exit(main())
