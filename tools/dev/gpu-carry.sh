#!/usr/bin/env bash
# Prepares .carry/ on the CPU machine for the device tool's GPU machine (its
# image has no LuaJIT, yaml-cpp or GoogleTest, an older nccl.h, and no
# nccl-tests): Debian runtime/dev packages for tools/dev/carried-deps.sh, NCCL
# 2.28.9's headers for the drop-in, and nccl-tests' source.  Then pass
# carry [".carry"] to the device tool and run e.g. tools/dev/gpu-pending.sh there.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .carry/gpu-deps/debs .carry/nccl-h
( cd .carry/gpu-deps/debs &&
  apt-get download libluajit-5.1-2 libluajit-5.1-common libluajit-5.1-dev libyaml-cpp0.7 \
    libyaml-cpp-dev libgtest-dev pkgconf pkgconf-bin libpkgconf3 )
for h in nccl.h nccl_device.h nccl_device; do
  [ -e "/usr/local/cuda/include/$h" ] && cp -r "/usr/local/cuda/include/$h" .carry/nccl-h/
done
for t in shared/third_party/nccl-tests.tar.gz ../shared/third_party/nccl-tests.tar.gz; do
  [ -f "$t" ] && { cp "$t" .carry/; break; }
done
du -sh .carry
ls .carry .carry/nccl-h
