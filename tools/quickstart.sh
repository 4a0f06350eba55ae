#!/usr/bin/env bash
# Quick start: install what is missing, build, and run the demo (4 ranks).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/deps.sh
[ -f build/build.ninja ] || meson setup build
ninja -C build
echo
build/tools/flagcx-demo -n 4
