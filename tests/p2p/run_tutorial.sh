#!/usr/bin/env bash
# Runs docs/P2P.md's tutorial as the page says: `decode` prints the command
# for the second process, which is run as printed.
# usage: run_tutorial.sh P2P_TUTORIAL_BINARY
set -u
bin=$1
out=$(mktemp) err=$(mktemp)
trap 'kill -9 $pd 2>/dev/null; rm -f "$out" "$err"' EXIT
export FLAGCX_TIMEOUT=${FLAGCX_TIMEOUT:-20}
"$bin" decode >"$out" 2>"$err" &
pd=$!
for _ in $(seq 600); do [ -s "$out" ] && break; sleep 0.1; done
read -r cmd < "$out" || { echo "FAIL: decode printed nothing"; cat "$err"; exit 1; }
echo "running: $cmd"
$cmd || { echo "FAIL: the prefill side failed"; exit 1; }
wait $pd || { echo "FAIL: the decode side failed"; cat "$out" "$err"; exit 1; }
cat "$out"
grep -q "^buffer: hello from process" "$out" || { echo "FAIL: the bytes did not arrive"; exit 1; }
grep -q "WARN" "$err" && { echo "FAIL: a warning was logged"; cat "$err"; exit 1; }
echo PASS
