"""Every operation of the "flagcx" backend, checked against closed-form
values (any number of ranks; launched by launch.py -n N, or torchrun).

    ops_test.py [--device cpu|cuda] [--backend flagcx|cpu:gloo,cuda:flagcx|...]

CPU tensors by default; --device cuda (torch 2.x with CUDA) puts every
tensor on the rank's GPU (LOCAL_RANK modulo the visible GPUs).

Each rank r contributes values built from r, so every expected result is
known without communication.  Bad input must raise a clear error before
anything is sent (every rank raises the same, so the ranks stay in step).
"""
import argparse
import datetime
import os
import sys
import warnings

import torch
import torch.distributed as dist

import flagcx

warnings.filterwarnings("ignore", message=".*will be deprecated")
parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
parser.add_argument("--backend", default="flagcx")
args = parser.parse_args()
rank, world = flagcx.env_from_mpi()
if args.device == "cuda":
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())
    torch.set_default_device("cuda")  # torch 2.x: every tensor below is a CUDA tensor
dist.init_process_group(args.backend, rank=rank, world_size=world,
                        timeout=datetime.timedelta(seconds=120))
failures = []
checks = 0


def check(name, got, want):
    global checks
    checks += 1
    want = torch.as_tensor(want).to(got.dtype).expand_as(got) if not torch.is_tensor(want) or \
        want.shape != got.shape else want.to(got.dtype)
    ok = torch.equal(got, want) if not got.is_floating_point() and not got.is_complex() \
        else torch.allclose(got.double() if not got.is_complex() else got,
                            want.double() if not want.is_complex() else want, rtol=1e-3, atol=1e-3)
    if not ok:
        failures.append(name)
        print(f"rank {rank}: FAIL {name}: got {got.flatten()[:8].tolist()} want "
              f"{want.flatten()[:8].tolist()}", flush=True)


def raises(name, fn, words, alt=None):
    """fn must raise, and its message must name every word in `words` (or in `alt`:
    a check torch itself makes first on some versions)."""
    global checks
    checks += 1
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - any error type, but the message must say why
        msg = str(e)
        if any(ws and all(w.lower() in msg.lower() for w in ws) for ws in (words, alt)):
            return
        failures.append(name)
        print(f"rank {rank}: FAIL {name}: message lacks {words}: {msg}", flush=True)
        return
    failures.append(name)
    print(f"rank {rank}: FAIL {name}: no error", flush=True)


W = world
r = rank
tri = W * (W + 1) // 2  # sum of r + 1 over ranks
fact = 1
for i in range(1, W + 1):
    fact *= i

# --- allreduce: every dtype flagcx has, every op ---------------------------
dtypes = [torch.int8, torch.uint8, torch.int32, torch.int64, torch.float16, torch.bfloat16,
          torch.float32, torch.float64]
for dt in dtypes:
    n = 1000
    base = torch.arange(n) % 5
    t = (base + r).to(dt)
    dist.all_reduce(t)
    check(f"allreduce sum {dt}", t, (base * W + W * (W - 1) // 2).to(dt))
    t = torch.full((7,), r + 1, dtype=dt)
    dist.all_reduce(t, op=dist.ReduceOp.PRODUCT)
    check(f"allreduce product {dt}", t, fact)
    t = torch.full((7,), r + 1, dtype=dt)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    check(f"allreduce min {dt}", t, 1)
    t = torch.full((7,), r + 1, dtype=dt)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    check(f"allreduce max {dt}", t, W)
    if dt.is_floating_point:
        t = torch.full((7,), r + 1, dtype=dt)
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        check(f"allreduce avg {dt}", t, (W + 1) / 2)

# A large one (several pipeline chunks) and an empty one.
t = torch.arange(1 << 20, dtype=torch.float32) + r
dist.all_reduce(t)
check("allreduce 4 MiB", t, torch.arange(1 << 20, dtype=torch.float32) * W + W * (W - 1) / 2)
t = torch.empty(0)
dist.all_reduce(t)
check("allreduce empty", t, torch.empty(0))

# PREMUL_SUM (a scalar factor; torch names it after NCCL).
if hasattr(dist, "_make_nccl_premul_sum"):
    t = torch.full((5,), float(r + 1))
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(2.0))
    check("allreduce premul_sum", t, 2.0 * tri)

# bool: SUM is OR, PRODUCT is AND.
t = torch.tensor([r == 0, False, True])
dist.all_reduce(t)
check("allreduce bool or", t, torch.tensor([True, False, True]))
t = torch.tensor([r == 0, True])
dist.all_reduce(t, op=dist.ReduceOp.PRODUCT)
check("allreduce bool and", t, torch.tensor([W == 1, True]))

# complex SUM (as pairs of reals).
t = torch.full((4,), complex(r + 1, -(r + 1)), dtype=torch.complex64)
dist.all_reduce(t)
check("allreduce complex", t, torch.full((4,), complex(tri, -tri), dtype=torch.complex64))

# --- allreduce_coalesced: several tensors in one flagcx group --------------
a = torch.full((3,), float(r))
b = torch.full((5,), 2.0 * r)
if hasattr(dist, "all_reduce_coalesced"):
    dist.all_reduce_coalesced([a, b])
    check("allreduce_coalesced a", a, W * (W - 1) / 2)
    check("allreduce_coalesced b", b, W * (W - 1))

# --- broadcast, reduce -----------------------------------------------------
for dt in (torch.int64, torch.float16, torch.bfloat16):
    t = torch.full((33,), r, dtype=dt)
    dist.broadcast(t, src=W - 1)
    check(f"broadcast {dt}", t, W - 1)
root = 1 % W
t = torch.full((9,), float(r + 1))
dist.reduce(t, dst=root)
if r == root:
    check("reduce sum", t, tri)
t = torch.full((9,), r + 1, dtype=torch.int32)
dist.reduce(t, dst=0, op=dist.ReduceOp.MAX)
if r == 0:
    check("reduce max", t, W)

# --- allgather: list, into one tensor, coalesced ---------------------------
outs = [torch.empty(6, dtype=torch.float64) for _ in range(W)]
dist.all_gather(outs, torch.full((6,), float(r), dtype=torch.float64))
for i in range(W):
    check(f"allgather[{i}]", outs[i], i)
out = torch.empty(W * 4, dtype=torch.int16)  # a type only moved, never reduced
gather_base = getattr(dist, "all_gather_into_tensor", None) or dist._all_gather_base
gather_base(out, torch.full((4,), r, dtype=torch.int16))
check("allgather_into_tensor", out, torch.arange(W, dtype=torch.int16).repeat_interleave(4))
ins = [torch.full((2,), float(r)), torch.full((3,), 10.0 * r)]
outl = [[torch.empty(2), torch.empty(3)] for _ in range(W)]
if hasattr(dist, "all_gather_coalesced"):
    dist.all_gather_coalesced(outl, ins)
    for i in range(W):
        check(f"allgather_coalesced[{i}][0]", outl[i][0], i)
        check(f"allgather_coalesced[{i}][1]", outl[i][1], 10 * i)

# --- gather, scatter -------------------------------------------------------
glist = [torch.empty(5) for _ in range(W)] if r == 0 else None
dist.gather(torch.full((5,), float(r * r)), gather_list=glist, dst=0)
if r == 0:
    for i in range(W):
        check(f"gather[{i}]", glist[i], i * i)
src = W - 1
slist = [torch.full((4,), 10.0 * i) for i in range(W)] if r == src else None
t = torch.empty(4)
dist.scatter(t, scatter_list=slist, src=src)
check("scatter", t, 10.0 * r)

# --- reduce_scatter: list and tensor, sum and max, bf16 --------------------
for dt in (torch.float32, torch.bfloat16, torch.int64):
    inl = [torch.full((3,), r + i, dtype=dt) for i in range(W)]
    t = torch.empty(3, dtype=dt)
    dist.reduce_scatter(t, inl)
    check(f"reduce_scatter sum {dt}", t, W * (W - 1) // 2 + W * r)
    inl = [torch.full((3,), (r + 1) * (i + 1), dtype=dt) for i in range(W)]
    t = torch.empty(3, dtype=dt)
    dist.reduce_scatter(t, inl, op=dist.ReduceOp.MAX)
    check(f"reduce_scatter max {dt}", t, W * (r + 1))
rs_base = getattr(dist, "reduce_scatter_tensor", None) or dist._reduce_scatter_base
inp = (torch.arange(W * 8, dtype=torch.float32) + r).contiguous()
t = torch.empty(8)
rs_base(t, inp)
check("reduce_scatter_tensor", t, (torch.arange(8, dtype=torch.float32) + 8 * r) * W + W * (W - 1) / 2)

# --- alltoall: equal, with split sizes, lists ------------------------------
k = 3
inp = torch.arange(W * k, dtype=torch.int64) + 100 * r
out = torch.empty(W * k, dtype=torch.int64)
dist.all_to_all_single(out, inp)
want = torch.cat([torch.arange(k, dtype=torch.int64) + r * k + 100 * j for j in range(W)])
check("all_to_all_single", out, want)


def count(src_rank, dst_rank):
    return src_rank + dst_rank + 1  # rows from src_rank to dst_rank


in_splits = [count(r, i) for i in range(W)]
out_splits = [count(j, r) for j in range(W)]
inp = torch.cat([torch.full((count(r, i), 3), 1000.0 * r + i) for i in range(W)])
out = torch.empty(sum(out_splits), 3)
dist.all_to_all_single(out, inp, output_split_sizes=out_splits, input_split_sizes=in_splits)
want = torch.cat([torch.full((count(j, r), 3), 1000.0 * j + r) for j in range(W)])
check("all_to_all_single splits", out, want)
inl = [torch.full((count(r, i),), 1000 * r + i, dtype=torch.int32) for i in range(W)]
outl = [torch.empty(count(j, r), dtype=torch.int32) for j in range(W)]
dist.all_to_all(outl, inl)
for j in range(W):
    check(f"all_to_all[{j}]", outl[j], 1000 * j + r)

# --- send/recv -------------------------------------------------------------
if W > 1:
    nxt, prv = (r + 1) % W, (r - 1) % W
    t = torch.full((10,), float(r))
    got = torch.empty(10)
    if r % 2 == 0:
        dist.send(t, nxt)
        dist.recv(got, prv)
    else:
        dist.recv(got, prv)
        dist.send(t, nxt)
    check("send/recv ring", got, float(prv))
    # A batch of isend/irecv in any order runs as one flagcx group.
    big = torch.full((1 << 18,), float(r))
    got = torch.empty(1 << 18)
    ops = [dist.P2POp(dist.isend, big, nxt), dist.P2POp(dist.irecv, got, prv)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    check("batch_isend_irecv ring", got, float(prv))

# torch 1.x: waiting inside a coalescing block is an error that says why;
# the operation still runs when the block ends.
if torch.__version__.startswith("1."):
    t = torch.full((6,), float(r + 1))
    reqs = []
    raised = []
    try:
        with dist.distributed_c10d._coalescing_manager(None, reqs):
            dist.all_reduce(t)
    except RuntimeError as e:
        raised.append(str(e))
    checks += 1
    if not raised or "coalescing block" not in raised[0]:
        failures.append("wait inside coalescing")
        print(f"rank {rank}: FAIL wait inside a coalescing block: {raised}", flush=True)
    dist.barrier()  # same stream, so the batch has run
    check("allreduce of the coalesced batch", t, tri)

# --- barrier, async work, futures ------------------------------------------
dist.barrier()
t = torch.full((1000,), float(r + 1))
w = dist.all_reduce(t, async_op=True)
fut = w.get_future().then(lambda f: f.value()[0] * 2)
doubled = fut.wait()
check("future then", doubled, 2.0 * tri)
check("async allreduce", t, tri)
if not w.is_completed():
    failures.append("is_completed after the future")
works = [dist.all_reduce(torch.full((100,), float(i + r)), async_op=True) for i in range(8)]
for w in works:
    w.wait()
    if not w.is_completed():
        failures.append("is_completed after wait")
# A Work given up before it ran must still run (and keep its tensor alive).
t = torch.full((64,), 1.0)
dist.all_reduce(t, async_op=True)
dist.barrier()
t2 = torch.full((64,), 1.0)
dist.all_reduce(t2)
check("dropped work ran before the next", t, float(W))

# --- a subgroup with its own communicator ----------------------------------
members = [0, W - 1] if W > 1 else [0]
g = dist.new_group(members)
if r in members:
    t = torch.full((5,), float(r))
    dist.all_reduce(t, group=g)
    check("new_group allreduce", t, float(sum(members)))
    dist.barrier(group=g)

# --- destroy_process_group frees a group's communicator and threads --------
def counts():
    return len(os.listdir("/proc/self/task")), len(os.listdir("/proc/self/fd"))


def churn():
    g = dist.new_group(list(range(W)), backend="flagcx")
    t = torch.ones(1000)
    dist.all_reduce(t, group=g)
    dist.all_reduce(t, group=g, async_op=True).get_future().wait()  # the engine thread too
    check("churn allreduce", t, float(W * W))
    dist.destroy_process_group(g)


if sys.platform.startswith("linux"):
    churn()  # first use of anything process-wide happens here
    before = counts()
    for _ in range(6):
        churn()
    after = counts()
    checks += 1
    if after[0] > before[0] + 1 or after[1] > before[1] + 2:
        failures.append("destroy_process_group leaks")
        print(f"rank {rank}: FAIL 6 groups created and destroyed: threads {before[0]} -> "
              f"{after[0]}, fds {before[1]} -> {after[1]}", flush=True)

# --- bad input: clear errors, raised at the call ---------------------------
raises("bitwise reduction", lambda: dist.all_reduce(torch.ones(3, dtype=torch.int32),
                                                    op=dist.ReduceOp.BAND), ["BAND", "not supported"])
raises("receive from any source", lambda: dist.recv(torch.empty(3)), ["any source"])
raises("non-contiguous", lambda: dist.all_reduce(torch.ones(4, 4).t()), ["contiguous"])
raises("allgather list size", lambda: dist.all_gather([torch.empty(2)] * (W + 1), torch.ones(2)),
       ["output list", str(W + 1)])
raises("reduce int16", lambda: dist.all_reduce(torch.ones(3, dtype=torch.int16)), ["Short", "reduce"])
raises("split sizes", lambda: dist.all_to_all_single(torch.empty(W), torch.empty(W),
                                                     input_split_sizes=[W + 1] + [0] * (W - 1),
                                                     output_split_sizes=[1] * W),
       ["split sizes add up"])
if W > 1:
    # torch 2.x refuses this itself ("Invalid destination rank ... same as the rank
    # of the current process") before the backend sees it.
    raises("send to self", lambda: dist.send(torch.ones(1), r), ["not another rank"],
           alt=["destination rank", "same as the rank"])

# Still in step after the errors?
t = torch.full((3,), float(r + 1))
dist.all_reduce(t)
check("allreduce after errors", t, tri)

# Destroying the group while futures with Python callbacks are pending:
# the callbacks still run (the group's thread needs the GIL to run them).
hits = []
for i in range(4):
    w = dist.all_reduce(torch.full((1 << 16,), float(i)), async_op=True)
    w.get_future().then(lambda f: hits.append(f.value()[0][0].item()))
dist.destroy_process_group()
checks += 1
if sorted(hits) != [0.0, W * 1.0, W * 2.0, W * 3.0]:
    failures.append("callbacks at destroy")
    print(f"rank {rank}: FAIL callbacks pending at destroy: {hits}", flush=True)
# flagcx.__version__ is the project version meson passes (plugins/torch/tests/meson.build).
checks += 1
if flagcx.__version__ != os.environ.get("EXPECT_FLAGCX_VERSION", flagcx.__version__):
    failures.append("__version__")
    print(f"rank {rank}: FAIL flagcx.__version__ {flagcx.__version__}, the project's "
          f"{os.environ['EXPECT_FLAGCX_VERSION']}", flush=True)
if failures:
    print(f"rank {rank}: {len(failures)} of {checks} checks failed: {failures}", flush=True)
    sys.exit(1)
print(f"rank {rank}/{world}: all {checks} checks passed ({args.device} tensors, backend "
      f"{args.backend}, flagcx {flagcx.__version__} (FlagCX API {flagcx.api_version()}) on {flagcx.device()}, torch {torch.__version__})",
      flush=True)
