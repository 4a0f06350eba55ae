#!/usr/bin/env bash
# tools/perf/device_api.sh and its writer without a GPU: the script refuses
# bad use and a machine without a GPU (exit 2, one clear line, the doc
# untouched); device_api.py turns the made-up raw lines of
# device_api_sample/ into the section (every kind of cell: a figure, a
# failed run, a run skipped past the time limit, a wrong result, NCCL not
# run or parsed from all_reduce_perf's table, the runs by block count), and
# a second write replaces the section instead of adding one, keeping the
# text around it.
#
# usage: device_api_check.sh SOURCE_ROOT
set -uo pipefail
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "device_api_check: $*" >&2; exit 1; }
has() { grep -qF -- "$2" "$1" || fail "no '$2' in $1"; }

# ---- the script: bad use, no GPU ----
out=$("$src/tools/perf/device_api.sh" 2>&1)
[ $? = 2 ] || fail "no argument: want exit 2"
echo "$out" | grep -q '^usage: tools/perf/device_api.sh BUILD_DIR' || fail "no usage line: $out"
if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  printf 'before\n' >"$tmp/untouched.md"
  out=$(DOC="$tmp/untouched.md" "$src/tools/perf/device_api.sh" "$tmp/no-build" 2>&1)
  [ $? = 2 ] || fail "no GPU: want exit 2"
  echo "$out" | grep -q 'no GPU here (nvidia-smi lists none): nothing measured' ||
    fail "no GPU: unclear message: $out"
  [ "$(cat "$tmp/untouched.md")" = before ] || fail "no GPU: the doc was changed"
fi

# ---- the writer ----
cp -r "$src/tests/perf/device_api_sample" "$tmp/work"
printf '# Performance\n\nText before.\n\n## Later section\n\nText after.\n' >"$tmp/doc.md"
python3 "$src/tools/perf/device_api.py" "$tmp/work" "$tmp/doc.md" >/dev/null
[ $? = 1 ] || fail "a failed run in devar.txt: want exit 1"
d=$tmp/doc.md
has "$d" "| 8 B | 6.10 | 1 | 30.50 | 40.00 | not run: NCCL needs one GPU per rank, this machine has 1 |"
has "$d" "| 512 B | 6.30 | 1 | failed (rc=1) | 46.00 |"
has "$d" "| 16 KiB | 8.50 | 8 | 40.00 | wrong result |"
has "$d" "| 64 KiB | 12.75 | 32 | skipped (time limit) | 53.00 |"
has "$d" "met at 5 of 6 sizes"
has "$d" "at 64 KiB over CUDA IPC: 8: 14.00 µs, 16: failed, 32: 12.75 µs."
has "$d" "- machine: Sample GPU (made-up figures for the writer's test) x 1, Sample CPU, 16 cores; MPS on"
has "$d" "- commit abc1234, 2000-01-01 00:00 UTC"
has "$d" "Text before."
has "$d" "Text after."

# NCCL's own table (two GPUs), written again over the first section.
cat >"$tmp/work/nccl.txt" <<'EOF'
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
           8             2     float     sum      -1    11.11    0.00    0.00      0    10.90    0.00    0.00      0
        4096          1024     float     sum      -1    12.34    0.33    0.33      0    12.10    0.34    0.34      0
       65536         16384     float     sum      -1    15.00    4.37    4.37      1    14.80    4.43    4.43      0
EOF
python3 "$src/tools/perf/device_api.py" "$tmp/work" "$d" >/dev/null
[ "$(grep -c '^<!-- tools/perf/device_api.sh: begin' "$d")" = 1 ] || fail "two sections after a rewrite"
[ "$(grep -c '^## Later section' "$d")" = 1 ] || fail "the text after the section was lost"
has "$d" "| 8 B | 6.10 | 1 | 30.50 | 40.00 | 11.11 |"
has "$d" "| 4 KiB | 7.40 | 2 | 33.00 | 49.00 | 12.34 |"
has "$d" "| 64 B | 6.20 | 1 | 30.60 | 43.00 | no result |"
has "$d" "| 64 KiB | 12.75 | 32 | skipped (time limit) | 53.00 | wrong result |"
echo "device_api_check: ok"
