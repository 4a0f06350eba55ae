#!/usr/bin/env bash
# Runs a torch example on N local ranks through the "flagcx" backend.
#
#   ./run.sh [debug] [script.py] [script args...]     (default: example.py)
#   NPROC=3 ./run.sh train_ddp.py --backend gloo
#
# torch 2.x: launched with torchrun.  Debian's torch 1.13, whose torchrun
# fails on Python 3.11: launched with MPICH's mpiexec (the scripts map
# PMI_RANK/PMI_SIZE to RANK/WORLD_SIZE with flagcx.env_from_mpi()).
# The package is taken from the build tree (build/plugins/torch) when it is
# not installed.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"

if [ "${1:-}" = "debug" ]; then
  export FLAGCX_DEBUG=INFO FLAGCX_DEBUG_SUBSYS=ALL
  echo "FlagCX debug information enabled."
  shift
fi
script="${1:-example.py}"
[ $# -gt 0 ] && shift
case "$script" in /*) ;; *) script="$here/$script" ;; esac

# The interpreter that has torch: python3 on PATH, else Debian's.
PYTHON="${PYTHON:-}"
if [ -z "$PYTHON" ]; then
  for p in python3 /usr/bin/python3; do
    if command -v "$p" >/dev/null && "$p" -c 'import torch' 2>/dev/null; then PYTHON="$p"; break; fi
  done
fi
[ -n "$PYTHON" ] || { echo "run.sh: no python3 with torch (install python3-torch)" >&2; exit 1; }
if ! "$PYTHON" -c 'import flagcx' 2>/dev/null; then
  export PYTHONPATH="${BUILD_DIR:-$root/build}/plugins/torch${PYTHONPATH:+:$PYTHONPATH}"
fi

NPROC="${NPROC:-2}"
PORT="${MASTER_PORT:-$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')}"
export MASTER_ADDR="${MASTER_ADDR:-127.0.0.1}" MASTER_PORT="$PORT" UCX_NET_DEVICES="${UCX_NET_DEVICES:-lo}"
major="$("$PYTHON" -c 'import torch; print(torch.__version__.split(".")[0])')"
if [ "$major" -ge 2 ] && "$PYTHON" -c 'import torch.distributed.run' 2>/dev/null; then
  CMD=("$PYTHON" -m torch.distributed.run --nproc_per_node "$NPROC" --nnodes 1 --node_rank 0
       --master_addr "$MASTER_ADDR" --master_port "$MASTER_PORT" "$script" "$@")
else
  CMD=(mpiexec -n "$NPROC" "$PYTHON" "$script" "$@")
fi
echo "${CMD[*]}"
exec "${CMD[@]}"
