#!/usr/bin/python3
"""Writes the results file and plots of tools/perf/report.sh from its work folder.

usage: /usr/bin/python3 tools/perf/report.py WORK OUT

WORK holds machine.txt (key=value lines), runs.txt (op, transport, % busy
before, exit status, command; tab-separated) and <op>-<transport>.json (the
-J lines of test_<op>).  OUT gets results-<machine>.md and
results-<machine>-<transport>.png, replacing earlier ones.  A point's time is
the median of its --repeat runs; ratio = MPICH time / flagcx time (above 1:
flagcx faster).  Needs Debian's python3-matplotlib.
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

TRANSPORT_TITLE = {
    "shm": "Shared memory (flagcx's default on one host; MPICH on its default transports)",
    "socket": "Sockets (`FLAGCX_SHM_DISABLE=1`) against MPICH over TCP (`UCX_TLS=tcp,self`)",
}
BUSY_LIMIT = 10  # % of the CPUs busy before a run above which it is not a quiet-machine figure


def size(b):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= div:
            return f"{b / div:g} {unit}"
    return f"{b} B"


def load_rows(path):
    rows = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                if line.strip():
                    r = json.loads(line)
                    rows[r["bytes"]] = r
    return [rows[b] for b in sorted(rows)]


def read_work(work):
    machine = {}
    with open(os.path.join(work, "machine.txt")) as f:
        for line in f:
            k, _, v = line.rstrip("\n").partition("=")
            machine[k] = " ".join(v.split())
    runs = []
    with open(os.path.join(work, "runs.txt")) as f:
        for line in f:
            op, tr, busy, rc, cmd = line.rstrip("\n").split("\t")
            rows = load_rows(os.path.join(work, f"{op}-{tr}.json"))
            runs.append(dict(op=op, tr=tr, busy=int(busy), rc=int(rc), cmd=cmd, rows=rows))
    return machine, runs


def ratio(r):
    m = r.get("mpi_time_us")
    return m / r["time_us"] if m and r["time_us"] > 0 else None


def fmt_us(t):
    return "-" if t is None else (f"{t:.2f}" if t < 100 else f"{t:.0f}")


def fmt_ratio(q):
    return "-" if q is None else (f"**{q:.2f}**" if q < 1 else f"{q:.2f}")


def overview(lines, runs):
    """One row per op, one column per size: the ratio."""
    sizes = sorted({r["bytes"] for run in runs for r in run["rows"]})
    lines.append("| op | " + " | ".join(size(b) for b in sizes) + " |")
    lines.append("|---|" + "---:|" * len(sizes))
    for run in runs:
        by = {r["bytes"]: r for r in run["rows"]}
        cells = [fmt_ratio(ratio(by[b])) if b in by else "" for b in sizes]
        lines.append(f"| {run['op']} | " + " | ".join(cells) + " |")


def detail(lines, run):
    root = next((r["root"] for r in run["rows"] if r["root"] >= 0), None)
    lines.append(f"#### {run['op']}" + (f" (root {root})" if root is not None else ""))
    lines.append("")
    lines.append("| bytes | flagcx µs | spread | MPICH µs | MPICH / flagcx | flagcx busbw GB/s "
                 "| MPICH busbw GB/s |")
    lines.append("|---:|---:|---:|---:|---:|---:|---:|")
    for r in run["rows"]:
        t = r["time_us"]
        spread = (r["time_max_us"] - r["time_min_us"]) / t * 100 if t > 0 else 0
        wrong = f" ({r['wrong']} wrong)" if r["wrong"] else ""
        mpi_bw = r.get("mpi_busbw")
        lines.append(f"| {r['bytes']} | {fmt_us(t)}{wrong} | {spread:.0f} % | "
                     f"{fmt_us(r.get('mpi_time_us'))} | {fmt_ratio(ratio(r))} | "
                     f"{r['busbw']:.2f} | {'-' if mpi_bw is None else f'{mpi_bw:.2f}'} |")
    lines.append("")


def plot(runs, title, path):
    n = len(runs) + 1
    cols = min(4, n)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3.3 * rows), squeeze=False)
    axes = [a for row in axes for a in row]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    qa = axes[0]
    for i, run in enumerate(runs):
        c = colors[i % len(colors)]
        pts = [(r["bytes"], ratio(r)) for r in run["rows"] if ratio(r)]
        if pts:
            qa.plot(*zip(*pts), "o-", ms=3, color=c, label=run["op"])
        ax = axes[i + 1]
        x = [r["bytes"] for r in run["rows"]]
        ax.plot(x, [max(r["busbw"], 1e-4) for r in run["rows"]], "o-", ms=3, color=c, label="flagcx")
        mpi = [r for r in run["rows"] if r.get("mpi_busbw") is not None]
        if mpi:
            ax.plot([r["bytes"] for r in mpi], [max(r["mpi_busbw"], 1e-4) for r in mpi], "s--",
                    ms=3, color="gray", label="MPICH")
        ax.set_title(run["op"], fontsize=10)
        ax.set_yscale("log")
        ax.set_ylabel("busbw GB/s", fontsize=8)
        ax.legend(fontsize=7)
    qa.axhline(1.0, color="black", lw=0.8)
    qa.set_yscale("log")
    qa.set_title("MPICH time / flagcx time (> 1: flagcx faster)", fontsize=9)
    qa.legend(fontsize=6, ncol=2)
    for ax in axes[:n]:
        ax.set_xscale("log", base=2)
        ax.grid(True, which="both", alpha=0.3)
        ax.tick_params(labelsize=7)
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(
            lambda b, _p: size(int(b)).replace(" ", "")))
    for ax in axes[n:]:
        ax.set_visible(False)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=80)


def main(work, out):
    machine, runs = read_work(work)
    name = machine["machine"]
    busy = [r for r in runs if r["busy"] > BUSY_LIMIT]
    failed = [r for r in runs if r["rc"] != 0 or not r["rows"]]
    wrong = [r for r in runs if any(x["wrong"] for x in r["rows"])]
    lines = [f"# Benchmark results: {name}", "",
             "Made by `tools/perf/report.sh` (the method: [PERFORMANCE.md](../PERFORMANCE.md)); "
             "re-running it replaces this file and its plots.", "",
             "| | |", "|---|---|",
             f"| CPU | {machine['cpu']}, {machine['cores']} cores, {machine['memory']} |",
             f"| kernel | {machine['kernel']} |",
             f"| MPI baseline | {machine['mpi']}" + (f", UCX {machine['ucx']}" if machine.get("ucx") else "")
             + ", `UCX_NET_DEVICES=lo`, in the same runs |",
             f"| tree | commit {machine['commit']}, meson buildtype {machine['buildtype']} |",
             f"| command | `{machine['report']}` |",
             f"| each run | `[FLAGCX_SHM_DISABLE=1 UCX_TLS=tcp,self] mpiexec -n 2 test_<op> "
             f"{machine['sizes']} -m 1 [-r 0] {machine['flags']} -J FILE` |",
             f"| load average | {machine['load_before']} before, {machine['load_after']} after "
             f"({machine['seconds']} s) |", ""]
    if busy:
        lines += [f"**The machine was shared: {len(busy)} of {len(runs)} runs started with more than "
                  f"{BUSY_LIMIT} % of the CPUs busy with other work** (up to "
                  f"{max(r['busy'] for r in busy)} %). Both libraries ran in the same runs, so the "
                  "ratios compare like with like, but absolute times and the ratios of small sizes "
                  "are not quiet-machine figures.", ""]
    if failed:
        lines += ["Runs that failed or wrote nothing: "
                  + ", ".join(f"{r['op']} over {r['tr']} (exit {r['rc']})" for r in failed) + ".", ""]
    if wrong:
        lines += ["**Wrong results** in: " + ", ".join(f"{r['op']} over {r['tr']}" for r in wrong)
                  + " (see the `wrong` cells).", ""]
    lines += ["ratio = MPICH time / flagcx time, the median of each side's timed runs; **bold**: "
              "flagcx slower. spread = (slowest − fastest) / median of flagcx's runs.", ""]
    for tr in dict.fromkeys(r["tr"] for r in runs):
        trs = [r for r in runs if r["tr"] == tr and r["rows"]]
        if not trs:
            continue
        png = f"results-{name}-{tr}.png"
        plot(trs, f"{name}: 2 ranks, {tr}", os.path.join(out, png))
        lines += [f"## {TRANSPORT_TITLE.get(tr, tr)}", "", f"![busbw and ratio per op, {tr}]({png})", ""]
        overview(lines, trs)
        lines.append("")
        for run in trs:
            detail(lines, run)
    path = os.path.join(out, f"results-{name}.md")
    with open(path, "w") as f:
        f.write("\n".join(lines).rstrip("\n") + "\n")
    print(f"wrote {path} and its plots")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
