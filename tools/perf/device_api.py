#!/usr/bin/env python3
"""Writes tools/perf/device_api.sh's figures into docs/PERFORMANCE.md as the
section between the BEGIN and END markers (replacing it, or adding it at the
end), and prints it.  Reads from WORK_DIR: machine.txt (key=value lines),
devar.txt (device_allreduce's result lines, or "FAILED MODE BYTES rc=N"),
blocks.txt (the same at the largest size by block count),
engine.json (test_allreduce -J rows) or engine-not-run.txt, nccl.txt
(all_reduce_perf's output, or one "not run: ..." line).

usage: device_api.py WORK_DIR DOC        (DOC "-": print only)
"""
import json
import os
import re
import sys

BEGIN = "<!-- tools/perf/device_api.sh: begin (generated: re-running it replaces this section) -->"
END = "<!-- tools/perf/device_api.sh: end -->"
TITLE = "## Device API: one-kernel allreduce against the engine and NCCL"
GOAL_US = 10.0
DEVAR = re.compile(r"^device_allreduce: (\d+) ranks, (\d+) bytes, (CUDA IPC|through the proxy), "
                   r"(\d+) block\(s\) of (\d+) threads: ([0-9.]+) us per allreduce")


def lines(path):
    return open(path).read().splitlines() if os.path.exists(path) else []


def read_devar(work, name="devar.txt"):
    """{(mode, bytes): (us or None, note)}; mode "ipc" or "proxy"."""
    out = {}
    for line in lines(f"{work}/{name}"):
        m = DEVAR.match(line)
        if m:
            mode = "ipc" if m.group(3) == "CUDA IPC" else "proxy"
            out[(mode, int(m.group(2)))] = (float(m.group(6)), f"{m.group(4)} block(s)")
            continue
        f = line.split()
        if len(f) >= 3 and f[0] == "FAILED":
            out[(f[1], int(f[2]))] = (None, "failed (" + " ".join(f[3:]) + ")")
    return out


def read_blocks(work):
    """[(blocks, bytes, us or None)] of the runs by block count (blocks.txt:
    result lines, or "FAILED ipc BLOCKS rc=N")."""
    out = []
    for line in lines(f"{work}/blocks.txt"):
        m = DEVAR.match(line)
        if m:
            out.append((int(m.group(4)), int(m.group(2)), float(m.group(6))))
        elif line.startswith("FAILED ") and len(line.split()) >= 3:
            out.append((int(line.split()[2]), None, None))
    return out


def read_engine(work):
    """{bytes: us or None (wrong elements)}, or a reason it did not run."""
    notrun = lines(f"{work}/engine-not-run.txt")
    if notrun:
        return {}, notrun[0]
    rows = {}
    for line in lines(f"{work}/engine.json"):
        r = json.loads(line)
        if r.get("op") == "allreduce":
            rows[int(r["bytes"])] = None if r.get("wrong") else float(r["time_us"])
    return rows, None


def read_nccl(work):
    """{bytes: us or None}, or a reason it did not run."""
    text = lines(f"{work}/nccl.txt")
    if text and text[0].startswith("not run:"):
        return {}, text[0]
    rows = {}
    for line in text:
        f = line.split()
        if len(f) >= 9 and f[0].isdigit():
            try:
                rows[int(f[0])] = None if int(f[8]) else float(f[5])
            except ValueError:
                continue
    return rows, None


def size_name(b):
    return f"{b // 1024} KiB" if b >= 1024 and b % 1024 == 0 else f"{b} B"


def cell(v, missing):
    if v is None:
        return missing
    return f"{v:.2f}"


def section(machine, devar, engine, nccl, sizes, by_blocks=()):
    eng_rows, eng_why = engine
    nccl_rows, nccl_why = nccl
    skipped = machine.get("skipped", "")
    late = "skipped (time limit)"
    out = [BEGIN, TITLE, "",
           "Two ranks sharing one GPU (the MPS daemon on), mean time of one float-sum "
           "allreduce, calls issued back to back on one stream: "
           "`examples/device_allreduce.cu` (one kernel: puts with signals, waits, reduce) over "
           "CUDA IPC (1000 calls) and through the proxy (`FLAGCX_IPC_DISABLE=1`, 200 calls); "
           "the engine's `flagcxAllReduce` on device buffers (`tools/perf/test_allreduce`, "
           "`FLAGCX_DEVICE=cuda FLAGCX_USE_HETERO_COMM=1`, median of 3 repetitions, MPS off "
           "for NCCL); NCCL (nccl-tests `all_reduce_perf -g 2`, one GPU per rank) where the "
           "machine has the GPUs.", "",
           f"- machine: {machine.get('gpu', '?')} x {machine.get('ngpu', '?')}, "
           f"{machine.get('cpu', '?')}, {machine.get('cores', '?')} cores; MPS "
           f"{'on' if machine.get('mps') == '1' else 'off (the ranks time-slice the GPU)'}",
           f"- commit {machine.get('commit', '?')}, {machine.get('date', '?')}",
           f"- command: `{machine.get('command', '?')}`", "",
           "| size | device API, CUDA IPC (µs) | blocks | device API, proxy (µs) | "
           "engine, device buffers (µs) | NCCL (µs) |",
           "|---|---|---|---|---|---|"]
    met = 0
    for b in sizes:
        ipc_us, ipc_note = devar.get(("ipc", b), (None, late if f"devar-ipc-{b}" in skipped
                                                   else "no result"))
        px_us, px_note = devar.get(("proxy", b), (None, late if f"devar-proxy-{b}" in skipped
                                                  else "no result"))
        met += ipc_us is not None and ipc_us <= GOAL_US
        blocks = ipc_note.split()[0] if ipc_us is not None else "-"
        eng = eng_why or cell(eng_rows.get(b), late if "engine" in skipped else
                              ("wrong result" if b in eng_rows else "no result"))
        nc = nccl_why or cell(nccl_rows.get(b), late if "nccl" in skipped else
                              ("wrong result" if b in nccl_rows else "no result"))
        out.append(f"| {size_name(b)} | {cell(ipc_us, ipc_note)} | {blocks} | "
                   f"{cell(px_us, px_note)} | {eng} | {nc} |")
    out += ["", f"Goal: at most {GOAL_US:g} µs over CUDA IPC at 2 ranks: met at {met} of "
            f"{len(sizes)} sizes."]
    if by_blocks:
        size = next((b for _, b, _ in by_blocks if b), None)
        runs = ", ".join(f"{n}: " + (f"{us:.2f} µs" if us is not None else "failed")
                         for n, _, us in by_blocks)
        out.append(f"By block count (the example's fourth argument) at "
                   f"{size_name(size) if size else 'the largest size'} over CUDA IPC: {runs}.")
    if skipped:
        out.append(f"Skipped past the time limit: {skipped}.")
    out.append(END)
    return "\n".join(out) + "\n", met


def write(doc, text):
    old = open(doc).read() if os.path.exists(doc) else ""
    start, end = old.find(BEGIN), old.find(END)
    if start >= 0 and end > start:
        rest = old[end + len(END):].lstrip("\n")
        new = old[:start] + text + ("\n" + rest if rest else "")
    else:
        new = old.rstrip("\n") + ("\n\n" if old else "") + text
    open(doc, "w").write(new)


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    work, doc = sys.argv[1], sys.argv[2]
    machine = dict(l.split("=", 1) for l in lines(f"{work}/machine.txt") if "=" in l)
    devar = read_devar(work)
    sizes = sorted(int(x) for x in machine.get("sizes", "").split()) or sorted({b for _, b in devar})
    text, _ = section(machine, devar, read_engine(work), read_nccl(work), sizes, read_blocks(work))
    print(text)
    if doc != "-":
        write(doc, text)
    return 0 if devar and all(v is not None for v, _ in devar.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
