#!/usr/bin/env python3
"""Session 21's device scripts: one line per op / arm / size from logs named <op>-<arm>-r<round>.log
(test_<op> -m 1 output): the median of the rounds' ratios (MPI time / flagcx time), then each."""
import glob, os, re, sys

rows = {}
for f in sorted(glob.glob(sys.argv[1] + "/*.log")):
    op, arm, _ = os.path.basename(f)[:-4].rsplit("-", 2)
    for line in open(f):
        if re.match(r"^ +[0-9]", line):
            w = line.split()
            rows.setdefault((op, arm, int(w[0])), []).append(w[-1])
for (op, arm, size), v in sorted(rows.items()):
    med = sorted(float(x) for x in v)[len(v) // 2]
    print(f"{op} {arm} {size} med {med:.2f} [{' '.join(v)}]")
