#!/usr/bin/python3
"""Every relative link in the Markdown files under docs/ (and README.md) names a file
that exists, and every `docs/...` path written in backquotes too.

usage: /usr/bin/python3 tools/check-doc-links.py [FILE.md ...]   (exit 1 on a broken one)
"""
import glob
import os
import re
import sys

LINK = re.compile(r"\]\(([^)\s]+)\)")
CODE_PATH = re.compile(r"`(docs/[^`\s]*)`")


def broken(path, root):
    out = []
    base = os.path.dirname(path)
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            for target in LINK.findall(line):
                if re.match(r"[a-z]+:", target) or target.startswith("#"):
                    continue  # a URL or an anchor in the same file
                t = target.split("#", 1)[0]
                if not os.path.exists(os.path.normpath(os.path.join(base, t))):
                    out.append(f"{path}:{n}: link to {target}: no such file")
            for p in CODE_PATH.findall(line):
                p = p.rstrip(".,;:)")
                if "*" in p or "<" in p:
                    continue  # a pattern, not a file
                if not os.path.exists(os.path.join(root, p)):
                    out.append(f"{path}:{n}: `{p}`: no such file")
    return out


def main():
    root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    files = sys.argv[1:] or sorted(glob.glob(os.path.join(root, "docs", "**", "*.md"), recursive=True)
                                   + [os.path.join(root, "README.md")])
    problems = [p for f in files for p in broken(f, root)]
    for p in problems:
        print(os.path.relpath(p, root) if os.path.isabs(p) else p)
    print(f"{len(files)} files, {len(problems)} broken link(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
