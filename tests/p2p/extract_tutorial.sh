#!/usr/bin/env bash
# Writes the C++ block between <!-- tutorial:begin --> and <!-- tutorial:end -->
# of docs/P2P.md to OUT, so that the test builds exactly what the page shows.
# usage: extract_tutorial.sh P2P.md OUT
set -euo pipefail
sed -n '/^<!-- tutorial:begin -->$/,/^<!-- tutorial:end -->$/p' "$1" | grep -v '^<!-- tutorial:' |
  grep -v '^```' > "$2"
[ -s "$2" ] || { echo "no tutorial block in $1" >&2; exit 1; }
