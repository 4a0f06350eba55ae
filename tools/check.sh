#!/usr/bin/env bash
# The test command: install what is missing, build, run the quick suite.
#   tools/check.sh            quick suite in build/
#   tools/check.sh --full     also the full suite
set -euo pipefail
cd "$(dirname "$0")/.."
tools/deps.sh
full=0
for a in "$@"; do
  case "$a" in
    --full) full=1 ;;
    *) echo "usage: tools/check.sh [--full]" >&2; exit 2 ;;
  esac
done
[ -f build/build.ninja ] || meson setup build
ninja -C build
export UCX_NET_DEVICES=lo
meson test -C build --suite quick --print-errorlogs --num-processes 2
if [ "$full" = 1 ]; then
  meson test -C build --suite full --print-errorlogs --num-processes 1
fi
