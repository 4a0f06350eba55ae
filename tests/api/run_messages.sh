#!/usr/bin/env bash
# The messages a user meets when a call goes wrong (messages.c): each names
# its cause, the rank it concerns and no internal placeholder.
#   run_messages.sh MESSAGES_BINARY
set -uo pipefail
bin=$1
fail=0
out=$(mktemp)
trap 'rm -f "$out"' EXIT
run() {  # run MODE [VAR=VALUE...]: output of both ranks, log lines included
  local mode=$1; shift
  env FLAGCX_DEBUG=WARN FLAGCX_TIMEOUT=2 "$@" timeout 60 "$bin" "$mode" >"$out" 2>&1
}
has() { grep -qF -- "$1" "$out" || { echo "FAIL ($case): no \"$1\" in:"; cat "$out"; fail=1; }; }
lacks() { ! grep -qF -- "$1" "$out" || { echo "FAIL ($case): \"$1\" in:"; cat "$out"; fail=1; }; }

case=mismatch; run mismatch
has "rank 0: invalid usage | rank 0: mismatched calls: this rank called allreduce #0 (float32, count 8), rank 1 called allreduce #0 (float32, count 16)"
lacks "root"

case=late-block; run late
has "rank 1 did not reach this call within FLAGCX_TIMEOUT=2s"
has "rank 0: a peer failed, exited or did not answer in time"

case=late-rings; run late FLAGCX_SHM_SMALL_BYTES=0
grep -Eq "rank 0: .*(a message from rank 1|from rank 1 .*failed)" "$out" || { echo "FAIL ($case): rank 1 not named"; cat "$out"; fail=1; }
has "rank 0: a peer failed, exited or did not answer in time"

case=gone; run gone
grep -q "rank 1 is gone: [^ ]" "$out" || { echo "FAIL ($case): no cause after 'is gone:'"; cat "$out"; fail=1; }
lacks "is gone:  "

case=badop; run badop
has "flagcxAllReduce: op 77 is not a reduction operation"
lacks "(api:0)"
has "rank 0: invalid argument"

# An argument error is tagged by the family of the call, whichever check
# found it: a collective's NULL buffer is COLL like its bad op.
case=nullbuf; run nullbuf
has "flagcx WARN COLL flagcxAllReduce: sendbuff is NULL"

case=environment; run uniqueid FLAGCX_NET_CHUNK_SIZE=0
has "[-] flagcx WARN ENV FLAGCX_NET_CHUNK_SIZE=0 is not accepted"
has "using -2 (auto)"
lacks "[-1]"

case=interface; run uniqueid FLAGCX_SOCKET_IFNAME=no_such_if0
has "uniqueid: invalid argument"
has "FLAGCX_SOCKET_IFNAME=\"no_such_if0\""

[ "$fail" = 0 ] && echo "messages: all cases OK"
exit "$fail"
