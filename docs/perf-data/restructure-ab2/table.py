#!/usr/bin/python3
"""Markdown table from ab.sh's JSON: per op and size, the median over the 3 runs of each
run's median time (flagcx only; ab.sh runs no MPI baseline), before and after, and the
range of the runs' medians.   usage: table.py OUT"""
import json
import os
import statistics
import sys

out = sys.argv[1]
print("| op | bytes | before µs | after µs | after/before | before range | after range |")
print("|---|---:|---:|---:|---:|---:|---:|")
for op in ("allreduce", "allgather", "alltoall", "broadcast"):
    t = {"before": {}, "after": {}}
    for tag in t:
        for run in (1, 2, 3):
            p = os.path.join(out, f"{tag}-{op}-{run}.json")
            if not os.path.exists(p):
                continue
            for line in open(p):
                if line.strip():
                    r = json.loads(line)
                    t[tag].setdefault(r["bytes"], []).append(r["time_us"])
    for b in sorted(set(t["before"]) & set(t["after"])):
        bv, av = t["before"][b], t["after"][b]
        bm, am = statistics.median(bv), statistics.median(av)
        print(f"| {op} | {b} | {bm:.2f} | {am:.2f} | {am / bm:.2f} | "
              f"{min(bv):.2f}–{max(bv):.2f} | {min(av):.2f}–{max(av):.2f} |")
