#!/usr/bin/python3
"""Prints the tables of tools/perf/compare.sh from its work folder.

usage: /usr/bin/python3 tools/perf/compare.py WORK BEFORE_NAME AFTER_NAME

WORK holds <side>-<op>-<transport>-<round>.json (the -J lines of test_<op>),
side being before or after.  Exit status 1 when some size of the after build
is slower beyond the noise: its fastest run slower than the before build's
slowest run and its median more than SLOWER (10 %) above the before median.
"""
import glob
import json
import os
import statistics
import sys

SLOWER = 1.10


def load(work):
    """{(op, transport): {bytes: {side: [time_us of each round]}}}"""
    table = {}
    for path in glob.glob(os.path.join(work, "*.json")):
        side, op, tr, _ = os.path.basename(path)[: -len(".json")].split("-")
        with open(path) as f:
            for line in f:
                row = json.loads(line)
                point = table.setdefault((op, tr), {}).setdefault(row["bytes"], {})
                point.setdefault(side, []).append(row["time_us"])
    return table


def main():
    work, before, after = sys.argv[1:4]
    table = load(work)
    slower = 0
    print(f"before: {before}   after: {after}   time = median of the rounds (us)")
    for (op, tr), points in sorted(table.items()):
        print(f"\n{op} over {tr}\n{'bytes':>10} {'before':>10} {'after':>10} {'after/before':>13}  verdict")
        for size, sides in sorted(points.items()):
            b, a = sides.get("before", []), sides.get("after", [])
            if not b or not a:
                print(f"{size:>10}  (missing runs)")
                continue
            mb, ma = statistics.median(b), statistics.median(a)
            worse = min(a) > max(b) and ma > mb * SLOWER
            slower += worse
            print(f"{size:>10} {mb:>10.2f} {ma:>10.2f} {ma / mb:>13.2f}  {'SLOWER' if worse else ''}")
    print(f"\n{slower} size(s) slower beyond noise")
    return 1 if slower else 0


if __name__ == "__main__":
    sys.exit(main())
