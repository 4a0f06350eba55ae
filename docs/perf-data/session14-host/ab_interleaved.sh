#!/bin/bash
# ab_interleaved.sh OP ROUNDS, from the repository root: A = the libflagcx.so in $LIBA (through
# LD_LIBRARY_PATH), B = build-perf's; EXTRA (environment) and ARGS (flags) apply to both; launches
# alternate A, B; prints per size the median MPI/flagcx ratio, its range and the median time.
op=$1; rounds=$2; out=/tmp/ab2.$op.$$; : > $out
for i in $(seq $rounds); do for v in A B; do if [ $v = A ]; then L=${LIBA:?set LIBA to a folder holding the old libflagcx.so}; else L=; fi
  LD_LIBRARY_PATH=$L env $EXTRA UCX_TLS=tcp,self UCX_NET_DEVICES=lo timeout 300 mpiexec -n 2 build-perf/tools/perf/test_$op -b ${SZB:-256K} -e ${SZE:-16M} -f 4 -m 1 --repeat 1 -w 3 -W 30 -n 10 -T 30 -r 0 $ARGS 2>&1 | grep -E "^ +[0-9]" | awk -v v=$v '{print v, $1, $6, $NF}' >> $out
done; done
python3 - $out <<'PY'
import sys,statistics as st
d={}
for l in open(sys.argv[1]):
  v,b,t,r=l.split(); d.setdefault((int(b),v),[]).append((float(t),float(r)))
for b in sorted(set(k[0] for k in d)):
  a=d[(b,'A')]; bb=d[(b,'B')]
  print(f"{b:>10} A ratio med {st.median(x[1] for x in a):.2f} [{min(x[1] for x in a):.2f}-{max(x[1] for x in a):.2f}] t {st.median(x[0] for x in a):.1f} | B ratio med {st.median(x[1] for x in bb):.2f} [{min(x[1] for x in bb):.2f}-{max(x[1] for x in bb):.2f}] t {st.median(x[0] for x in bb):.1f}")
PY
