#!/usr/bin/env bash
# tools/perf/kv_transfer over the P2P engine's verbs path on the software RDMA
# device (FLAGCX_IB_SOFTWARE_DEVICE=1, FLAGCX_SHM_DISABLE=1): 2048 pieces per
# WriteVector, four times the device's queue depth, so the worker's flow
# control runs; the decode side verifies every value.  Not a figure: the
# software device copies through a shared-memory ring.
# usage: run_kv_verbs.sh KV_TRANSFER_BINARY
set -u
out=$(FLAGCX_IB_SOFTWARE_DEVICE=1 FLAGCX_SHM_DISABLE=1 FLAGCX_SOCKET_IFNAME=lo FLAGCX_DEBUG=INFO \
      FLAGCX_DEBUG_SUBSYS=P2P FLAGCX_TIMEOUT=60 "$1" --iters 3 2>&1)
rc=$?
echo "$out"
ok=0
[ $rc = 0 ] || { echo "FAIL: kv_transfer exit $rc"; ok=1; }
grep -q "decode: verified (0 wrong values)" <<<"$out" || { echo "FAIL: no verified decode"; ok=1; }
grep -q "connected to .*verbs 1" <<<"$out" || { echo "FAIL: the connection did not set up verbs"; ok=1; }
grep -Eq "transfer\(s\), [1-9][0-9]* bytes over verbs" <<<"$out" || { echo "FAIL: no bytes over verbs"; ok=1; }
[ $ok = 0 ] && echo PASS
exit $ok
