#!/usr/bin/env python3
"""Pools several runs of dropin_vs_nccl (tools/dev/nccl-dropin-gpu.sh, stage
inproc, NCCLX_INPROC_RUNS) into one verdict on the drop-in's bound (1 % at >= 1 MiB, 0.3 us below).

Each run prints, per op and size, the median over its rounds of the paired
difference drop-in - NCCL-A and of the control NCCL-B - NCCL-A.  One run of
60 rounds still moves a 2-8 MiB cell (about 4-6 us per call at one rank, so a
bound of 40-60 ns) across the bound now and then, for NVIDIA against itself
as well.  The pooled figure per cell is the median of the runs' medians, the
bound is applied to it, for the drop-in and for the control.

usage: inproc_pool.py INPROC_TXT   (exit 0 when the drop-in is within the bound
                                    in every cell)
"""
import statistics
import sys

OPS = {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "alltoall", "sendrecv"}


def main(path):
    cells = {}
    with open(path) as f:
        for line in f:
            p = line.split()
            if len(p) > 8 and p[0] in OPS and p[1].isdigit():
                # op bytes NCCL best diff diff% ctrl ...
                cells.setdefault((p[0], int(p[1])), []).append((float(p[2]), float(p[4]), float(p[6])))
    if not cells:
        print("inproc_pool: no table rows in %s" % path)
        return 2
    runs = min(len(v) for v in cells.values())
    over = [0, 0]
    worst = (0.0, None)
    for (op, size), v in sorted(cells.items()):
        base = statistics.median(x[0] for x in v)
        bound = 0.01 * base if size >= (1 << 20) else 0.3
        diff = statistics.median(x[1] for x in v)
        ctrl = statistics.median(x[2] for x in v)
        over[0] += diff > bound
        over[1] += ctrl > bound
        if diff / bound > worst[0]:
            worst = (diff / bound, "%s %d B: %+.3f us (bound %.3f)" % (op, size, diff, bound))
    print("pooled over %d runs, %d cells: drop-in over the bound in %d, control (NVIDIA against "
          "NVIDIA) in %d; closest to it: %s" % (runs, len(cells), over[0], over[1], worst[1]))
    return 0 if over[0] == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
