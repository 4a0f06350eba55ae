"""The Torch API test of flagcx: every torch.distributed operation through
the "flagcx" backend, each result printed and checked against the value it
must have.  Launch with run.sh (torchrun on torch 2.x, mpiexec otherwise):

    ./run.sh example.py              # 2 ranks, CPU tensors
    ./run.sh example.py --device cuda    # torch 2.x with CUDA: GPU tensors
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist

import flagcx  # registers the backend "flagcx"

parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
parser.add_argument("--backend", default="flagcx",
                    help='e.g. "flagcx" or, on torch 2.x, "cpu:gloo,cuda:flagcx"')
args = parser.parse_args()

rank, world = flagcx.env_from_mpi()  # a no-op under torchrun
dev = torch.device("cpu")
if args.device == "cuda":
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())
    dev = torch.device("cuda", torch.cuda.current_device())
dist.init_process_group(args.backend, rank=rank, world_size=world)
wrong = 0


def show(name, got, want):
    global wrong
    want = torch.as_tensor(want, dtype=got.dtype, device=got.device).expand_as(got)
    ok = torch.allclose(got.double(), want.double())
    wrong += not ok
    print(f"[rank {rank}] {name:<28} {got.flatten()[:4].tolist()}  {'OK' if ok else 'WRONG, want ' + str(want.flatten()[:4].tolist())}",
          flush=True)


def full(n, v, dtype=torch.float32):
    return torch.full((n,), v, dtype=dtype, device=dev)


W, r = world, rank
total = W * (W + 1) // 2  # sum over ranks of rank + 1

t = full(4, r + 1.0); dist.all_reduce(t); show("all_reduce sum", t, total)
t = full(4, r + 1.0); dist.all_reduce(t, op=dist.ReduceOp.MAX); show("all_reduce max", t, W)
t = full(4, r + 1.0); dist.all_reduce(t, op=dist.ReduceOp.MIN); show("all_reduce min", t, 1)
t = full(4, r + 1.0); dist.all_reduce(t, op=dist.ReduceOp.PRODUCT)
show("all_reduce product", t, torch.arange(1, W + 1).prod().item())
t = full(4, r + 1.0); dist.all_reduce(t, op=dist.ReduceOp.AVG); show("all_reduce avg", t, (W + 1) / 2)
t = full(4, r + 1.0, torch.bfloat16); dist.all_reduce(t); show("all_reduce bf16", t, total)
t = full(4, r + 1.0, torch.float16); dist.all_reduce(t); show("all_reduce fp16", t, total)
t = full(4, r); dist.broadcast(t, src=0); show("broadcast from 0", t, 0)
t = full(4, r + 1.0); dist.reduce(t, dst=0)
if r == 0:
    show("reduce to 0", t, total)
outs = [full(2, -1.0) for _ in range(W)]
dist.all_gather(outs, full(2, r * 10.0))
for i in range(W):
    show(f"all_gather[{i}]", outs[i], i * 10)
out = full(2 * W, -1.0)
(getattr(dist, "all_gather_into_tensor", None) or dist._all_gather_base)(out, full(2, float(r)))
show("all_gather_into_tensor", out, torch.arange(W).repeat_interleave(2).to(dev))
glist = [full(2, -1.0) for _ in range(W)] if r == 0 else None
dist.gather(full(2, r + 0.5), gather_list=glist, dst=0)
if r == 0:
    for i in range(W):
        show(f"gather[{i}]", glist[i], i + 0.5)
t = full(2, -1.0)
dist.scatter(t, scatter_list=[full(2, 7.0 * i) for i in range(W)] if r == 0 else None, src=0)
show("scatter from 0", t, 7 * r)
t = full(3, -1.0)
dist.reduce_scatter(t, [full(3, float(r + i)) for i in range(W)])
show("reduce_scatter", t, W * r + W * (W - 1) // 2)
t = full(3, -1.0)
(getattr(dist, "reduce_scatter_tensor", None) or dist._reduce_scatter_base)(t, full(3 * W, 1.0))
show("reduce_scatter_tensor", t, W)
out = full(W, -1.0)
dist.all_to_all_single(out, torch.arange(W, dtype=torch.float32, device=dev) + 100 * r)
show("all_to_all_single", out, (torch.arange(W) * 100 + r).to(dev))
# Split sizes: rank r sends j + 1 elements to rank j.
out = full(W * (r + 1), -1.0)
dist.all_to_all_single(out, torch.cat([full(j + 1, 10.0 * r + j) for j in range(W)]),
                       output_split_sizes=[r + 1] * W, input_split_sizes=[j + 1 for j in range(W)])
show("all_to_all_single splits", out, torch.cat([full(r + 1, 10.0 * j + r) for j in range(W)]))
outs = [full(1, -1.0) for _ in range(W)]
dist.all_to_all(outs, [full(1, 10.0 * r + j) for j in range(W)])
show("all_to_all", torch.cat(outs), torch.cat([full(1, 10.0 * j + r) for j in range(W)]))
if W > 1:
    nxt, prv = (r + 1) % W, (r - 1) % W
    got = full(3, -1.0)
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, full(3, float(r)), nxt),
                                   dist.P2POp(dist.irecv, got, prv)])
    for q in reqs:
        q.wait()
    show("isend/irecv ring", got, prv)
    if r == 0:
        dist.send(full(3, 42.0), 1)
    elif r == 1:
        got = full(3, -1.0)
        dist.recv(got, 0)
        show("send/recv 0 -> 1", got, 42)
work = dist.all_reduce(full(4, 1.0), async_op=True)
fut = work.get_future().then(lambda f: f.value()[0] + 1)
show("async all_reduce + future", fut.wait(), W + 1)
dist.barrier()
dist.destroy_process_group()
print(f"[rank {rank}] {'all results correct' if wrong == 0 else f'{wrong} WRONG'} "
      f"(flagcx {flagcx.__version__} (FlagCX API {flagcx.api_version()}) on {flagcx.device()}, torch {torch.__version__})", flush=True)
sys.exit(1 if wrong else 0)
