#!/usr/bin/python3
"""Plot test_<op> -J files: bus bandwidth and latency against size.

usage: /usr/bin/python3 tools/perf/plot.py -o out.png run1.json [run2.json ...]
       [--label NAME ...] [--op allreduce] [--dtype float] [--redop sum] [--title T]

Every input file is one run (one line per run in each panel); rows are
filtered to one op/dtype/redop/root (the first found unless given).  Where a
run has an MPI baseline (-m 1), it is drawn dashed in the same colour.
Needs Debian's python3-matplotlib.
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(path):
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{n}: not JSON: {e}")
    return rows


def size_label(b, _pos=None):
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= div:
            v = b / div
            return f"{v:.0f}{unit}" if v == int(v) else f"{v:.1f}{unit}"
    return f"{b:.0f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+", help="-J output of test_<op> (JSON lines)")
    ap.add_argument("-o", "--out", default="perf.png", help="PNG to write")
    ap.add_argument("--label", action="append", help="legend name per file (default: file name)")
    ap.add_argument("--op"), ap.add_argument("--dtype"), ap.add_argument("--redop")
    ap.add_argument("--root", type=int)
    ap.add_argument("--title")
    a = ap.parse_args()
    if a.label and len(a.label) != len(a.files):
        sys.exit("--label must be given once per file")

    fig, (bw, lat) = plt.subplots(1, 2, figsize=(13, 5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    title_op = None
    for i, path in enumerate(a.files):
        rows = load(path)
        if not rows:
            print(f"{path}: no rows, skipped", file=sys.stderr)
            continue
        first = rows[0]
        want = {
            "op": a.op or first["op"],
            "dtype": a.dtype or first["dtype"],
            "redop": a.redop or first["redop"],
            "root": a.root if a.root is not None else first["root"],
        }
        rows = [r for r in rows if all(r.get(k) == v for k, v in want.items())]
        rows = [r for r in rows if r["bytes"] > 0]
        rows.sort(key=lambda r: r["bytes"])
        if not rows:
            continue
        title_op = title_op or f"{want['op']} {want['dtype']} {want['redop']}, {first['nranks']} ranks"
        name = a.label[i] if a.label else os.path.splitext(os.path.basename(path))[0]
        c = colors[i % len(colors)]
        x = [r["bytes"] for r in rows]
        bw.plot(x, [max(r["busbw"], 1e-6) for r in rows], "o-", color=c, label=f"flagcx {name}")
        lat.plot(x, [r["time_us"] for r in rows], "o-", color=c, label=f"flagcx {name}")
        mpi = [r for r in rows if r.get("mpi_time_us") is not None]
        if mpi:
            xm = [r["bytes"] for r in mpi]
            bw.plot(xm, [max(r["mpi_busbw"], 1e-6) for r in mpi], "s--", color=c, alpha=0.7,
                    label=f"MPI {name}")
            lat.plot(xm, [r["mpi_time_us"] for r in mpi], "s--", color=c, alpha=0.7,
                     label=f"MPI {name}")
    for ax, ylabel in ((bw, "bus bandwidth (GB/s)"), (lat, "time per call (µs)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel(ylabel)
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(size_label))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(a.title or title_op or "flagcx benchmark")
    fig.tight_layout()
    fig.savefig(a.out, dpi=90)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
