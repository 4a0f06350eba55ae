#!/usr/bin/python3
"""Markdown tables from test_<op> -J files (as bench_all.sh writes them).

usage: /usr/bin/python3 tools/perf/table.py DIR[,DIR2,...] [op ...]

A point's time is the median of its --repeat runs (bench_all.sh takes 5);
the spread is in the JSON (time_min_us, time_max_us).  Several comma-separated
DIRs are merged point by point, taking the smaller median of each side
separately; the method of docs/PERFORMANCE.md is one DIR.

For each op: one row per size, with flagcx and MPI bus bandwidth (GB/s) and
the ratio MPI time / flagcx time (> 1: flagcx faster), for shm (DIR/op-shm.json)
and socket (DIR/op-socket.json) side by side.  Then a summary: per op, the
smallest ratio at >= 1 MiB for each transport.
"""
import json
import os
import sys


def load_one(path):
    if not os.path.exists(path):
        return {}
    rows = {}
    with open(path) as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                rows[r["bytes"]] = r
    return rows


def load(paths):
    """Best of several runs, per size: flagcx and MPI minima taken separately."""
    best = {}
    for path in paths:
        for b, r in load_one(path).items():
            if b not in best:
                best[b] = dict(r)
                continue
            m = best[b]
            if r["time_us"] < m["time_us"]:
                m.update(time_us=r["time_us"], algbw=r["algbw"], busbw=r["busbw"])
            m["wrong"] = max(m["wrong"], r["wrong"])
            if r.get("mpi_time_us") is not None and (
                    m.get("mpi_time_us") is None or r["mpi_time_us"] < m["mpi_time_us"]):
                m.update(mpi_time_us=r["mpi_time_us"], mpi_busbw=r["mpi_busbw"])
    return best


def size(b):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= div:
            return f"{b / div:g} {unit}"
    return f"{b} B"


def cell(r):
    if not r:
        return "", "", "", ""
    t = f"{r['time_us']:.1f}" if r["time_us"] < 1000 else f"{r['time_us']:.0f}"
    fb = f"{r['busbw']:.2f}"
    if r.get("mpi_time_us") is None:
        return t, fb, "-", "-"
    ratio = r["mpi_time_us"] / r["time_us"] if r["time_us"] > 0 else 0
    return t, fb, f"{r['mpi_busbw']:.2f}", f"**{ratio:.2f}**" if ratio < 1 else f"{ratio:.2f}"


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    dirs = sys.argv[1].split(",")
    ops = sys.argv[2:] or ["allreduce", "allgather", "reducescatter", "broadcast", "reduce",
                           "gather", "scatter", "alltoall", "alltoallv", "sendrecv"]
    summary = []
    for op in ops:
        shm, sock = load([f"{d}/{op}-shm.json" for d in dirs]), load(
            [f"{d}/{op}-socket.json" for d in dirs])
        if not shm and not sock:
            continue
        print(f"\n#### {op}\n")
        print("| size | shm µs | shm busbw | MPICH busbw | ratio | socket µs | socket busbw "
              "| MPICH-TCP busbw | ratio |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        mins = {}
        for b in sorted(set(shm) | set(sock)):
            a, s = cell(shm.get(b)), cell(sock.get(b))
            print(f"| {size(b)} | " + " | ".join(a) + " | " + " | ".join(s) + " |")
            for name, rows in (("shm", shm), ("socket", sock)):
                r = rows.get(b)
                if r and b >= (1 << 20) and r.get("mpi_time_us") and r["time_us"] > 0:
                    q = r["mpi_time_us"] / r["time_us"]
                    mins[name] = min(mins.get(name, q), q)
        summary.append((op, mins.get("shm"), mins.get("socket")))
    print("\n#### smallest ratio (MPI time / flagcx time) at >= 1 MiB\n")
    print("| op | shm vs MPICH | socket vs MPICH-TCP |")
    print("|---|---:|---:|")
    for op, a, b in summary:
        f = lambda v: "-" if v is None else f"{v:.2f}"
        print(f"| {op} | {f(a)} | {f(b)} |")


if __name__ == "__main__":
    main()
