#!/usr/bin/env python3
"""Writes the medians of tools/perf/elastic_cost.sh's rounds into
docs/PERFORMANCE.md's section "Recovery: shrink against a fresh init"
(replacing it, or adding it at the end), and prints the table.

usage: elastic_cost.py WORK_DIR DOC
"""
import statistics
import sys

TITLE = "## Recovery: shrink against a fresh init"


def read(work):
    machine = dict(l.rstrip("\n").split("=", 1) for l in open(f"{work}/machine.txt") if "=" in l)
    rows = {}
    for line in open(f"{work}/lines.txt"):
        f = line.split()
        if len(f) == 4:
            rows.setdefault(f[0], []).append((float(f[2]), float(f[3])))
    return machine, rows


def section(machine, rows):
    n = None
    out = [TITLE, "",
           "Survivors' time to a working communicator after one of N ranks is SIGKILLed "
           "mid-allreduce (`build/tools/elastic_cost`, fresh processes each round; each "
           "survivor times its own calls from its failed allreduce's return to the new "
           "communicator's): `flagcxCommShrink(FLAGCX_SHRINK_ABORT)` against "
           "`flagcxCommAbort` + `flagcxGetUniqueId` (first survivor; the id handed over "
           "through shared memory) + `flagcxCommInitRank` of N-1 ranks.  Medians over the "
           "rounds of the slowest survivor's time and of the median survivor's.", "",
           f"- machine: {machine.get('cpu', '?')}, {machine.get('cores', '?')} cores, "
           f"{machine.get('busy_before', '?')}% / {machine.get('busy_after', '?')}% of the CPUs "
           "busy before / after the run (other work may share them); the ranks outnumber the "
           "cores when N is above the core count, so these times are mostly waiting for a "
           "core, not work",
           f"- transport: {machine.get('transport', '?')}; commit {machine.get('commit', '?')}",
           f"- command: `{machine.get('command', '?')}`", "",
           "| recovery | rounds | slowest survivor (ms) | median survivor (ms) |",
           "|---|---|---|---|"]
    for mode, label in (("shrink", "shrink (ABORT)"), ("fresh", "abort + fresh init")):
        r = rows.get(mode, [])
        if not r:
            out.append(f"| {label} | 0 | - | - |")
            continue
        out.append(f"| {label} | {len(r)} | {statistics.median(x for x, _ in r):.1f} | "
                   f"{statistics.median(y for _, y in r):.1f} |")
    if rows.get("shrink") and rows.get("fresh"):
        ratio = statistics.median(x for x, _ in rows["fresh"]) / statistics.median(
            x for x, _ in rows["shrink"])
        out += ["", f"Fresh init / shrink (slowest survivor): {ratio:.2f}x."]
    return "\n".join(out) + "\n"


def main():
    work, doc = sys.argv[1], sys.argv[2]
    machine, rows = read(work)
    text = section(machine, rows)
    print(text)
    old = open(doc).read()
    start = old.find(TITLE)
    if start < 0:
        new = old.rstrip("\n") + "\n\n" + text
    else:
        # The section ends at the next heading or the next generated
        # section's opening marker, whichever comes first.
        ends = [e for e in (old.find("\n## ", start + len(TITLE)),
                            old.find("\n<!--", start + len(TITLE))) if e >= 0]
        end = min(ends) if ends else -1
        new = old[:start] + text + (old[end:] if end >= 0 else "")
    open(doc, "w").write(new)
    return 0 if rows.get("shrink") and rows.get("fresh") else 1


if __name__ == "__main__":
    sys.exit(main())
