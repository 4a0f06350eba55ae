#!/usr/bin/env bash
# Runs a command that must fail in one particular way: exit code CODE and a
# line of its output (stdout and stderr together) equal to LINE.  A crash, a
# hang cut by meson, another exit code or another message fails the test.
#   expect_fail.sh CODE LINE command [args...]
set -u
want_code=$1 want_line=$2
shift 2
out=$("$@" 2>&1)
code=$?
if [ "$code" = "$want_code" ] && grep -qxF -- "$want_line" <<<"$out"; then
  echo "failed as expected: exit $code, \"$want_line\""
  exit 0
fi
echo "$out"
echo "expect_fail: wanted exit $want_code and the line \"$want_line\"; got exit $code" >&2
exit 1
