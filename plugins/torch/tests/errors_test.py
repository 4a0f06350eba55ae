"""Failures surface as Python exceptions carrying flagcx's message (2 ranks):
 1. a silent peer: rank 1 stays alive but does not join an allreduce; rank
    0's allreduce must fail with flagcx's timeout error naming
    FLAGCX_TIMEOUT=5s -- the group's 5 s timeout handed to flagcx (its own
    default is 600 s) -- and not hang;
 2. a departed peer: rank 1 exits; rank 0's allreduce, waited through a Work
    future (the path DDP uses), fails with flagcx's message, and so does the
    next one; the group can still be destroyed.
Ordering between the ranks goes through torch's store, not through sleeps.
"""
import datetime
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

import flagcx

rank, world = flagcx.env_from_mpi()
assert world == 2, "errors_test.py runs on 2 ranks"
os.environ.pop("FLAGCX_TIMEOUT", None)  # the group's timeout must be the one used
dist.init_process_group("flagcx", rank=rank, world_size=world,
                        timeout=datetime.timedelta(seconds=5))
store = c10d._get_default_store()
silent = dist.new_group([0, 1], backend="flagcx")
for g in (None, silent):
    t = torch.ones(1000)
    dist.all_reduce(t, group=g)  # both communicators are up
    assert t[0].item() == 2.0, t

bad = 0
if rank == 1:
    store.wait(["timed-out"], datetime.timedelta(seconds=120))
    sys.stdout.flush()
    os._exit(0)  # leave without a word

# 1. silent peer
try:
    dist.all_reduce(torch.ones(1 << 16), group=silent)
    print("rank 0: FAIL: the allreduce without its peer succeeded", flush=True)
    bad += 1
except RuntimeError as e:
    msg = str(e)
    print(f"rank 0: silent peer: {msg}", flush=True)
    if "flagcx" not in msg or "FLAGCX_TIMEOUT=5s" not in msg:
        print("rank 0: FAIL: expected flagcx's timeout error with FLAGCX_TIMEOUT=5s", flush=True)
        bad += 1
store.set("timed-out", "1")

# 2. departed peer, through a future
try:
    w = dist.all_reduce(torch.ones(1 << 16), async_op=True)
    w.get_future().wait()
    print("rank 0: FAIL: the allreduce with a departed peer succeeded", flush=True)
    bad += 1
except RuntimeError as e:
    msg = str(e)
    print(f"rank 0: departed peer: {msg}", flush=True)
    if "flagcx" not in msg:
        print("rank 0: FAIL: the error does not come from flagcx", flush=True)
        bad += 1
try:
    dist.all_reduce(torch.ones(10))
    print("rank 0: FAIL: a later allreduce succeeded", flush=True)
    bad += 1
except RuntimeError as e:
    print(f"rank 0: and the next allreduce fails too: {e}", flush=True)
dist.destroy_process_group()
print("rank 0: destroyed the groups after the failures", flush=True)
sys.exit(1 if bad else 0)
