#!/usr/bin/env bash
# One-off (session 11): build the drop-in with HEAD's group code (flagcx's
# group opened by ncclGroupStart) in /tmp/oldtree, for an A/B of the lazy
# group brackets in the compare stage.
cd "$(dirname "$0")/.."
. tools/carried-deps.sh
export PATH=$PATH:/usr/local/cuda/bin
OLD=/tmp/oldtree
rm -rf $OLD; mkdir -p $OLD
tar cf - --exclude='./build*' --exclude=./.carry --exclude=./.git . | tar xf - -C $OLD
cp .carry/oldgroup/* $OLD/plugins/nccl/
cd $OLD && meson setup b -Dcuda=enabled -Dnccl=enabled -Dnccl_dropin=enabled -Dgpu_archs=90 \
  -Dmpi=disabled -Dtorch=disabled -Dtests=disabled -Dnccl_include=/work/main/.carry/nccl-h &&
  ninja -C b libflagcx.so plugins/nccl/libnccl.so.2.28.9
echo "old build rc $?"
