#!/usr/bin/python3
"""Plot `flagcx-algo scale --csv`: one rank's init cost against nranks.

usage: /usr/bin/python3 tools/algo/scale_plot.py scale.csv -o docs/scale.png
       [--title T] [--run build/tools/flagcx-algo [--nranks 64,128,...]]
       /usr/bin/python3 tools/algo/scale_plot.py scale.csv --table

--run first measures: one `flagcx-algo scale --nranks N --csv` process per N
(so that no size reuses memory another freed), written to scale.csv.

Left: init time (wall and CPU of AlgoSet::create) with the steps it compiled
(thousands), on log-log axes, so O(steps) growth shows as parallel lines.
Right: init memory (peak RSS increase, bytes kept) and the peers its schedules
name without the all-to-all ops.  --table prints the Markdown table of
docs/SCALE.md instead.  Needs Debian's python3-matplotlib.
"""
import argparse
import csv
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(path):
    rows = []
    with open(path) as f:
        for row in csv.DictReader(f):
            if row["kind"] == "init":
                rows.append(row)
    if not rows:
        sys.exit(f"{path}: no 'init' rows (made by flagcx-algo scale --csv?)")
    rows.sort(key=lambda r: int(r["nranks"]))
    return rows


def measure(tool, nranks, path):
    lines = []
    for n in nranks.split(","):
        out = subprocess.run([tool, "scale", "--nranks", n, "--csv"], check=True,
                             capture_output=True, text=True).stdout.splitlines()
        lines += out if not lines else out[1:]  # one header
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def table(rows):
    print("| nranks | steps compiled | wall ms | CPU ms | CPU µs/step | peak MB | kept MB "
          "| peers | peers (no all-to-all) |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        steps = int(r["steps"])
        print(f"| {r['nranks']} | {steps} | {float(r['ms']):.1f} | {float(r['cpu_ms']):.1f} "
              f"| {1000 * float(r['cpu_ms']) / max(steps, 1):.2f} | {float(r['peak_mb']):.1f} "
              f"| {float(r['kept_mb']):.2f} | {r['peers']} | {r['peers_no_alltoall']} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("-o", "--out")
    ap.add_argument("--table", action="store_true")
    ap.add_argument("--run", metavar="FLAGCX_ALGO")
    ap.add_argument("--nranks", default="64,128,256,512,1024,2048,4096,8192,16384")
    ap.add_argument("--title", default="One rank's communicator init (flagcx-algo scale)")
    a = ap.parse_args()
    if a.run:
        measure(a.run, a.nranks, a.csv)
    rows = load(a.csv)
    if a.table:
        table(rows)
        return
    if not a.out:
        sys.exit("name the image with -o (or ask for --table)")
    n = [int(r["nranks"]) for r in rows]
    fig, (t, m) = plt.subplots(1, 2, figsize=(11, 4.2))
    t.loglog(n, [float(r["ms"]) for r in rows], "o-", label="init wall (ms)")
    t.loglog(n, [float(r["cpu_ms"]) for r in rows], "s-", label="init CPU (ms)")
    t.loglog(n, [int(r["steps"]) / 1000 for r in rows], "^--", label="steps compiled (thousands)")
    t.axhline(100, color="grey", lw=0.8, ls=":")
    t.text(n[0], 110, "100 ms", color="grey", fontsize=8)
    t.set_xlabel("nranks")
    t.set_title("time and work")
    m.loglog(n, [max(float(r["peak_mb"]), 0.01) for r in rows], "o-", label="peak RSS increase (MB)")
    m.loglog(n, [float(r["kept_mb"]) for r in rows], "s-", label="kept: schedules + scripts (MB)")
    m.loglog(n, [int(r["peers_no_alltoall"]) for r in rows], "^--",
             label="peers named (no all-to-all)")
    m.axhline(50, color="grey", lw=0.8, ls=":")
    m.text(n[0], 40, "50 MB", color="grey", fontsize=8)
    m.set_xlabel("nranks")
    m.set_title("memory and peers")
    for ax in (t, m):
        ax.set_xticks(n)
        ax.set_xticklabels([str(x) for x in n], rotation=45, fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(a.title)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)


if __name__ == "__main__":
    main()
