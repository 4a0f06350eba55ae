#!/usr/bin/env bash
# Stage `meson install --destdir`, then build the FlagCX 0.13 programs of this
# folder through pkg-config against the staged copy only, and run them on the
# host adapter.   usage: run_v013_program.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
src=$2
# stage_install: $stage, $libdir, and $san (a sanitized library needs its
# runtime loaded first: the programs are built with the same sanitizers).
. "$src/../install/stage.sh"
stage_install "$build"
[ -f "$libdir/pkgconfig/flagcx.pc" ] || { echo "no flagcx.pc in the staged install"; exit 1; }
export PKG_CONFIG_PATH=$libdir/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
cflags=$(pkg-config --cflags flagcx)
libs=$(pkg-config --libs flagcx)
case "$cflags $libs" in *"$stage"*) ;; *) echo "pkg-config does not point into the stage: $cflags $libs"; exit 1 ;; esac
datadir=$(dirname "$(find "$stage" -type d -path '*/share/flagcx' -print -quit)")/flagcx
# -Werror: a call that does not match the header is an error, not a warning.
${CC:-cc} -std=c11 -Wall -Wextra -Werror $san $cflags "$src/v013_program.c" -o "$stage/v013_c" $libs
${CXX:-c++} -std=c++17 -Wall -Wextra -Werror $san $cflags "$src/v013_headers.cc" -o "$stage/v013_cxx" $libs
export LD_LIBRARY_PATH=$libdir  # only the staged copy, not the build tree
export FLAGCX_DEVICE=host FLAGCX_DATA_DIR=$datadir FLAGCX_TIMEOUT=60 FLAGCX_DEBUG=NONE
progdeps=$(ldd "$stage/v013_c")
case "$progdeps" in *"$stage"*libflagcx*|*libflagcx*"$stage"*) ;;
  *) echo "the program does not load the staged libflagcx:"; echo "$progdeps"; exit 1 ;; esac
"$stage/v013_c"
"$stage/v013_cxx"
