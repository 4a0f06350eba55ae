#!/usr/bin/env bash
# session 18: session 16's socket run trimmed to fit one device call (~400 s): flagcx main, the
# helper-thread build and two lanes against MPICH over TCP, 3 interleaved rounds.
SOCKET_VARIANTS="main helpers lanes2" SOCKET_LIMIT_S=400 \
  exec bash "$(dirname "$0")/../session16-gpu/socket-cores.sh"
