#!/usr/bin/env python3
"""Tables of tools/perf/hetero.sh: mixed (host + CUDA) communicators against
host-only ones of the same shape, staged CUDA ranks against host buffers, and
the 8-byte latency, from the JSON lines and machine.txt in WORK.  Written
into DOC between the section's markers (replacing what was there; before
"## Not done yet" the first time), or to stdout when DOC is "-".

usage: hetero.py WORK DOC
"""
import glob
import json
import os
import sys

BEGIN = "<!-- tools/perf/hetero.sh: begin (generated; re-running replaces it) -->"
END = "<!-- tools/perf/hetero.sh: end -->"
TARGET = {"allreduce": 80}  # percent of host-only; every other op 70
LATENCY_BUDGET_US = 15.0
MIB = 1 << 20
ORDER = ["allreduce", "allgather", "reducescatter", "broadcast", "alltoall", "sendrecv"]


def load(work):
    runs = {}
    for path in glob.glob(os.path.join(work, "*.json")):
        rows = {}
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    r = json.loads(line)
                    rows[r["bytes"]] = r
        runs[os.path.basename(path)[:-5]] = rows
    return runs


def machine(work):
    m = {}
    try:
        with open(os.path.join(work, "machine.txt")) as f:
            for line in f:
                k, _, v = line.rstrip("\n").partition("=")
                m[k] = v
    except OSError:
        pass
    return m


def size(b):
    for unit, name in ((MIB, "MiB"), (1024, "KiB")):
        if b >= unit and b % unit == 0:
            return f"{b // unit} {name}"
    return f"{b} B"


def gbs(row):
    return f"{row['busbw']:.2f}" if row else "-"


def ratio(num, den, target=None):
    if not num or not den or den["busbw"] <= 0:
        return "-"
    pct = 100.0 * num["busbw"] / den["busbw"]
    text = f"{pct:.0f} %"
    return text + (f" (below {target})" if target is not None and pct < target else "")


def wrong(rows):
    return sum(r.get("wrong", 0) or 0 for r in rows.values())


def ops_table(runs, shape, title):
    present = {k.split("-")[-1] for k in runs if k.startswith("ops-") and f"-{shape}-" in k}
    ops = [o for o in ORDER if o in present] + sorted(present - set(ORDER))
    out = [f"**{title}** (busbw GB/s; target: allreduce ≥ 80 %, the others ≥ 70 % of host-only)", "",
           "| op | bytes | shm host-only | shm mixed | mixed / host | sockets host-only | sockets mixed | mixed / host |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for op in ops:
        target = TARGET.get(op, 70)
        cols = {}
        for t in ("shm", "socket"):
            for m in ("host", "mixed"):
                cols[t, m] = runs.get(f"ops-{t}-{shape}-{m}-{op}", {})
        sizes = sorted(set().union(*[set(c) for c in cols.values()]))
        for b in sizes:
            cells = [op, size(b)]
            for t in ("shm", "socket"):
                h, x = cols[t, "host"].get(b), cols[t, "mixed"].get(b)
                cells += [gbs(h), gbs(x), ratio(x, h, target)]
            out.append("| " + " | ".join(cells) + " |")
    return out


def staged_table(runs, mps):
    out = [f"**Staged CUDA ranks** (`FLAGCX_USE_HETERO_COMM=1 FLAGCX_IPC_DISABLE=1`), 2 ranks sharing the GPU"
           f"{' under the MPS daemon' if mps == '1' else ' (no MPS daemon could be started)'}, allreduce, "
           "against the same pair on host buffers (busbw GB/s; target ≥ 80 %)", "",
           "| transport | bytes | host buffers | staged CUDA | staged / host |", "| --- | ---: | ---: | ---: | ---: |"]
    for t in ("shm", "socket"):
        h, s = runs.get(f"staged-{t}-pair-host", {}), runs.get(f"staged-{t}-pair-staged", {})
        for b in sorted(set(h) | set(s)):
            out.append(f"| {t} | {size(b)} | {gbs(h.get(b))} | {gbs(s.get(b))} | {ratio(s.get(b), h.get(b), 80)} |")
    return out


def latency_table(runs):
    out = ["**8-byte allreduce**, pair (median time per call of back-to-back calls on one stream, µs; "
           "target: mixed ≤ host-only + 15 µs). Mixed: the CUDA rank's calls return at once, "
           "stream-ordered; blocking: the same with `FLAGCX_STREAM_ASYNC_BYTES=0` (each call waits "
           "for the stream's earlier work and the operation)", "",
           "| transport | host-only µs | mixed µs | difference µs | within +15 µs | mixed, blocking µs |",
           "| --- | ---: | ---: | ---: | --- | ---: |"]

    def us(name):
        rows = list(runs.get(name, {}).values())
        return rows[0]["time_us"] if rows else None

    for t in ("shm", "socket"):
        h, x, b = us(f"lat-{t}-pair-host"), us(f"lat-{t}-pair-mixed"), us(f"lat-{t}-pair-mixed-blocking")
        cell = lambda v: "-" if v is None else f"{v:.1f}"
        d = None if h is None or x is None else x - h
        out.append(f"| {t} | {cell(h)} | {cell(x)} | {'-' if d is None else f'{d:+.1f}'} | "
                   f"{'-' if d is None else 'yes' if d <= LATENCY_BUDGET_US else 'no'} | {cell(b)} |")
    return out


def section(work):
    runs, m = load(work), machine(work)
    bad = sorted(k for k, rows in runs.items() if wrong(rows))
    out = [BEGIN, "", "## Mixed communicators: `tools/perf/hetero.sh`", "",
           f"Machine: {m.get('gpu', '?')}, {m.get('host', '?')}; commit {m.get('commit', '?')}, "
           f"{m.get('date', '?')}; one rank per process ({m.get('mpi', '?')}), "
           f"`tools/perf/test_<op> {m.get('sizes', '')} {m.get('flags', '')}`, one run per point. "
           "Mixed pair: ranks (host, CUDA); mixed four: (host, CUDA, host, CUDA), the CUDA ranks "
           f"sharing the GPU{' under the MPS daemon' if m.get('mps') == '1' else ''}; host-only: the same "
           "shape with every rank on the host adapter. The CUDA ranks of a mixed communicator stage "
           "through host memory (docs/GPU.md, \"Host staging\").", ""]
    if bad:
        out += [f"Runs with wrong elements: {', '.join(bad)}.", ""]
    if m.get("skipped"):
        out += [f"Not run (time limit): {m['skipped']}.", ""]
    out += ops_table(runs, "pair", "Mixed pair") + [""]
    out += ops_table(runs, "four", "Mixed four") + [""]
    out += staged_table(runs, m.get("mps", "0")) + [""]
    out += latency_table(runs) + ["", END]
    return "\n".join(out) + "\n"


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    work, doc = sys.argv[1], sys.argv[2]
    text = section(work)
    if doc == "-":
        sys.stdout.write(text)
        return
    with open(doc) as f:
        old = f.read()
    if BEGIN in old and END in old:
        new = old[:old.index(BEGIN)] + text + old[old.index(END) + len(END) + 1:]
    elif "\n## Not done yet" in old:
        k = old.index("\n## Not done yet") + 1
        new = old[:k] + text + "\n" + old[k:]
    else:
        new = old.rstrip("\n") + "\n\n" + text
    with open(doc, "w") as f:
        f.write(new)


if __name__ == "__main__":
    main()
