# Sourced by session 21's device scripts (run from anywhere in the tree, carry .carry): logs go
# to $OUT/logs, the host is logged, the MPICH + flagcx bundle (.carry/mpi-bench.tgz, made by
# session20-gpu/mk-bundle.sh) is unpacked to $M, and both libraries talk over loopback TCP.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
L=$OUT/logs; mkdir -p $L; T0=$SECONDS
{ lscpu | grep -E "Model name|^CPU\(s\)"; uptime; } | tee $OUT/host.txt
mkdir -p /tmp/mbx && tar xzf .carry/mpi-bench.tgz -C /tmp/mbx; M=/tmp/mbx/mb
export LD_LIBRARY_PATH=$M/lib FLAGCX_DATA_DIR=$PWD FLAGCX_SHM_DISABLE=1 UCX_TLS=tcp,self UCX_NET_DEVICES=lo
