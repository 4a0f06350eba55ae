#!/usr/bin/env python3
"""Does a library export every function that NCCL's nccl.h declares?

usage: check_exports.py NCCL_H LIBRARY [NM]

Parses the header (comments, preprocessor lines and attributes removed; every
top-level statement that is a function declaration counts), reads the
library's defined dynamic symbols with `nm -D --defined-only`, and fails on
any declared function the library does not define.  Exported symbols that the
header does not declare are listed too, and fail unless they are the
drop-in's marker.
"""
import re
import subprocess
import sys

# The marker, and the two host functions of NCCL 2.28's device API
# (nccl_device/core.h) that PyTorch 2.x links: without them libtorch_cuda.so
# does not load under the drop-in.
# NCCL 2.29's ncclCommGetUniqueId and ncclCommGrow are exported whatever the
# header's version.
ALLOWED_EXTRA = {"flagcxNcclDropin", "ncclDevCommCreate", "ncclDevCommDestroy",
                 "pncclDevCommCreate", "pncclDevCommDestroy",
                 "ncclCommGetUniqueId", "pncclCommGetUniqueId", "ncclCommGrow", "pncclCommGrow"}


def declared(header_text):
    text = re.sub(r"/\*.*?\*/", " ", header_text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = "\n".join(l for l in text.splitlines() if not l.lstrip().startswith("#"))
    text = re.sub(r'extern\s+"C"\s*\{', " ", text)
    # __attribute__ ((...)) with nested parentheses
    while True:
        m = re.search(r"__attribute__\s*\(", text)
        if not m:
            break
        depth, i = 0, m.end() - 1
        while i < len(text):
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
            if depth == 0:
                break
        text = text[: m.start()] + " " + text[i:]
    names = set()
    for stmt in re.split(r"[;{}]", text):
        s = " ".join(stmt.split())
        if not s or s.startswith("typedef"):
            continue
        m = re.match(r"^(?:extern\s+)?(?:const\s+)?[A-Za-z_]\w*(?:\s*\*)*\s+\**\s*(p?nccl\w+)\s*\(", s)
        if m:
            names.add(m.group(1))
    return names


def exported(lib, nm):
    out = subprocess.run([nm, "-D", "--defined-only", lib], check=True,
                         capture_output=True, text=True).stdout
    syms = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[1] in "TtWiRDB":
            syms.add(parts[2].split("@")[0])
    return syms


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    header, lib = sys.argv[1], sys.argv[2]
    nm = sys.argv[3] if len(sys.argv) > 3 else "nm"
    want = declared(open(header, encoding="utf-8", errors="replace").read())
    if len(want) < 40:  # nccl.h 2.28 declares 82 (nccl* and pnccl*)
        print(f"FAIL: only {len(want)} functions parsed from {header}: the parser is broken")
        return 1
    have = exported(lib, nm)
    missing = sorted(want - have)
    extra = sorted(s for s in have - want if s not in ALLOWED_EXTRA)
    print(f"{header}: {len(want)} functions; {lib}: {len(have)} defined dynamic symbols")
    for s in missing:
        print(f"  missing: {s}")
    for s in extra:
        print(f"  exported but not in nccl.h: {s}")
    if missing or extra:
        print(f"FAIL: {len(missing)} missing, {len(extra)} unexpected")
        return 1
    print("OK: every nccl.h function is exported, nothing else but the marker")
    return 0


if __name__ == "__main__":
    sys.exit(main())
