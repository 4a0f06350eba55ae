"""A 4-rank training job loses a rank and goes on with 3 through the flagcx
backend's shrink.  The script starts its ranks itself (multiprocessing,
spawn; a launcher would end the job when a rank dies).  Rank 3 SIGKILLs
itself after its backward of step KILL_STEP, while the others reduce that
step's gradients; each survivor's call fails, it shrinks the group with the
abort flag excluding rank 3, restores the state from the start of the failed
step and trains the remaining steps on 3 ranks.  Its losses and final
weights must equal (relative difference < 1e-5) those of a fresh 3-rank run
from that state, computed here without communication (the mean of the three
survivors' gradients, whose data each rank can make).

    --api torch   torch >= 2.10: DDP on the default group, recovery through
                  torch.distributed.shrink_group (the backend's shrink)
    --api plugin  any torch (Debian's 1.13 here): the gradients reduced by
                  ProcessGroupFlagcx.allreduce, recovery through its
                  shrink_group (flagcxCommShrink underneath)

usage: python3 shrink_test.py [--api plugin|torch]
"""
import argparse
import copy
import datetime
import multiprocessing as mp
import os
import signal
import socket
import sys

WORLD, VICTIM, KILL_STEP, STEPS = 4, 3, 4, 12


def batch(step, rank):
    import torch
    g = torch.Generator().manual_seed(1000 * step + rank)  # each rank its own data
    return torch.randn(16, 32, generator=g), torch.randn(16, 8, generator=g)


def model():
    import torch
    import torch.nn as nn
    torch.manual_seed(1234)
    return nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 8))


def reference(state, ranks, start):
    """A fresh run of `ranks` from `state` (model, optimizer) at step
    `start`: every step the mean of their gradients.  Each survivor's own
    loss per step, and the final weights."""
    import torch
    import torch.nn as nn
    net = model()
    net.load_state_dict(state[0])
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    # torch 2.x's load_state_dict keeps the given momentum tensors (1.13
    # copied them): a copy, so that training never writes into `state`.
    opt.load_state_dict(copy.deepcopy(state[1]))
    losses = {r: [] for r in ranks}
    for step in range(start, STEPS):
        grads = None
        for r in ranks:
            net.zero_grad()
            x, y = batch(step, r)
            loss = nn.functional.mse_loss(net(x), y)
            loss.backward()
            losses[r].append(loss.item())
            g = [p.grad.clone() for p in net.parameters()]
            grads = g if grads is None else [a + b for a, b in zip(grads, g)]
        for p, g in zip(net.parameters(), grads):
            p.grad = g / len(ranks)
        opt.step()
    return losses, torch.cat([p.detach().flatten() for p in net.parameters()])


def worker(rank, port, api, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), FLAGCX_TIMEOUT="10")
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import flagcx
    timeout = datetime.timedelta(seconds=60)
    if api == "torch":
        dist.init_process_group("flagcx", rank=rank, world_size=WORLD, timeout=timeout)
        group = dist.group.WORLD
    else:
        store = dist.TCPStore("127.0.0.1", port, WORLD, rank == 0, timeout)
        group = flagcx.ProcessGroupFlagcx(store, rank, WORLD, timeout)
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)

    def wrap():
        if api != "torch":
            return net
        from torch.nn.parallel import DistributedDataParallel as DDP
        return DDP(net, process_group=group, bucket_cap_mb=0.01)

    ddp = wrap()
    losses, step, size, shrunk_at, saved, recovery_state = [], 0, WORLD, None, None, None
    while step < STEPS:
        saved = (copy.deepcopy(net.state_dict()), copy.deepcopy(opt.state_dict()))
        try:
            opt.zero_grad()
            x, y = batch(step, rank)
            loss = nn.functional.mse_loss(ddp(x), y)
            if rank == VICTIM and step == KILL_STEP:
                os.kill(os.getpid(), signal.SIGKILL)
            loss.backward()  # DDP reduces the gradients here
            if api != "torch":
                for p in net.parameters():
                    group.allreduce([p.grad]).wait()
                    p.grad /= size
            opt.step()
        except RuntimeError as e:
            if shrunk_at is not None:
                raise
            print(f"rank {rank}: step {step} failed ({str(e).splitlines()[0][:120]}); shrinking",
                  flush=True)
            if api == "torch":
                group = dist.shrink_group([VICTIM], shrink_flags=getattr(dist, "SHRINK_ABORT", 1))
            else:
                group = group.shrink_group([VICTIM], flagcx._C.SHRINK_ABORT)
            size, shrunk_at, recovery_state = WORLD - 1, step, saved
            net.load_state_dict(saved[0])
            opt.load_state_dict(copy.deepcopy(saved[1]))
            ddp = wrap()
            continue
        losses.append(loss.item())
        step += 1
    if shrunk_at is None:
        out.put((rank, "never failed"))
        return
    survivors = [r for r in range(WORLD) if r != VICTIM]
    ref_losses, ref_w = reference(recovery_state, survivors, shrunk_at)
    w = torch.cat([p.detach().flatten() for p in net.parameters()])
    mine = torch.tensor(losses[shrunk_at:])
    lr = rel(mine, torch.tensor(ref_losses[rank]))
    wr = rel(w, ref_w)
    verdict = "ok"
    if not (lr < 1e-5 and wr < 1e-5):
        verdict = f"FAIL: against a fresh 3-rank run: losses {lr:.2e}, weights {wr:.2e}"
    elif rel(w, torch.cat([p.flatten() for p in model().parameters()])) < 1e-3:
        verdict = "FAIL: the weights never moved (an empty comparison)"
    print(f"rank {rank}: shrunk at step {shrunk_at}, {STEPS - shrunk_at} steps on 3 ranks; "
          f"relative difference to a fresh 3-rank run: losses {lr:.2e}, weights {wr:.2e}",
          flush=True)
    out.put((rank, verdict))


def rel(a, b):
    return (a - b).abs().max().item() / max(b.abs().max().item(), 1e-30)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--api", default="plugin", choices=["plugin", "torch"])
    args = p.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, port, args.api, out)) for r in range(WORLD)]
    for pr in procs:
        pr.start()
    for pr in procs:
        pr.join(300)
    bad = 0
    for r, pr in enumerate(procs):
        want = -signal.SIGKILL if r == VICTIM else 0
        if pr.exitcode != want:
            print(f"FAIL: rank {r} ended with {pr.exitcode}, expected {want}")
            bad += 1
    while not out.empty():
        r, verdict = out.get()
        print(f"rank {r}: {verdict}")
        bad += verdict != "ok"
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
