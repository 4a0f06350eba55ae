#!/usr/bin/env bash
# What a user of an installed flagcx meets, on one staged install of the
# build (stage.sh: meson install --destdir, so the tree never sits at its
# configured prefix, as after a move):
#   the library file libflagcx.so.X.Y.Z, SONAME libflagcx.so.X, both links;
#   the installed programs run with no LD_LIBRARY_PATH (run path $ORIGIN);
#   flagcx.pc alone resolves --cflags --libs (and --static);
#   examples/sendrecv.c and examples/mpi_allreduce.c through pkg-config,
#   examples/cmake through find_package(flagcx CONFIG), examples/meson
#   through dependency('flagcx'): each built and run;
#   one version everywhere (SONAME, file name, pkg-config, CMake,
#   flagcx-info --version, the benchmark header, flagcx.__version__);
#   `ninja uninstall` leaves no file behind.
# A missing cmake or mpicc skips its part with a SKIP line (tools/deps.sh
# installs both).   usage: check_install.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
. "$src/tests/install/stage.sh"
stage_install "$build"
work=$stage/.work  # consumers' build folders: not part of the install
mkdir -p "$work"
# MPICH unloads its UCX modules at MPI_Finalize and LeakSanitizer then
# reports their allocations (tools/check.sh): no leak check under mpiexec.
mpi_run() { ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 mpiexec "$@"; }
fail() { echo "check_install: $*" >&2; exit 1; }
unset LD_LIBRARY_PATH FLAGCX_DATA_DIR PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR
export PKG_CONFIG_LIBDIR=$libdir/pkgconfig  # flagcx.pc and nothing else
export UCX_NET_DEVICES=lo
version=$(meson introspect --projectinfo "$build" | python3 -c 'import json, sys; print(json.load(sys.stdin)["version"])')
major=${version%%.*}
api=$(sed -n 's/^#define FLAGCX_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)$/\2/p' "$prefix/include/flagcx.h" | paste -sd.)
echo "flagcx $version (FlagCX API $api) staged at $prefix"

# The library and its two links.
lib=$libdir/libflagcx.so.$version
[ -f "$lib" ] && [ ! -L "$lib" ] || fail "no library file $lib"
[ "$(readlink "$libdir/libflagcx.so.$major")" = "libflagcx.so.$version" ] || fail "libflagcx.so.$major does not link to libflagcx.so.$version"
[ "$(readlink "$libdir/libflagcx.so")" = "libflagcx.so.$major" ] || fail "libflagcx.so does not link to libflagcx.so.$major"
soname=$(readelf -d "$lib" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ "$soname" = "libflagcx.so.$major" ] || fail "SONAME is '$soname', not libflagcx.so.$major"

# Installed programs: a run path relative to themselves, the staged library, and they run.
progs=("$prefix"/bin/flagcx-info "$prefix"/bin/flagcx-algo "$prefix"/bin/flagcx-demo)
[ -d "$prefix/libexec/flagcx" ] && progs+=("$prefix"/libexec/flagcx/test_*)
for p in "${progs[@]}"; do
  [ -x "$p" ] || fail "$p is not installed"
  dyn=$(readelf -d "$p")  # whole output first: under pipefail, grep -q's early exit fails the pipe
  grep -q 'R.*PATH.*\$ORIGIN/' <<<"$dyn" || fail "$p: no run path relative to \$ORIGIN: $(grep PATH <<<"$dyn")"
  deps=$(ldd "$p")
  loaded=$(sed -n "s/.*libflagcx.so.$major => \(.*\) (0x.*/\1/p" <<<"$deps")
  [ -n "$loaded" ] && [ "$(realpath "$loaded")" = "$(realpath "$lib")" ] || fail "$p does not load the staged library: $deps"
done
line=$("$prefix/bin/flagcx-info" --version)
[ "$line" = "flagcx $version, FlagCX API $api" ] || fail "flagcx-info --version says '$line'"
out=$("$prefix/bin/flagcx-algo" list)  # whole output first: grep -q would cut it short
grep -qxF "data dir: $prefix/share/flagcx" <<<"$out" || fail "flagcx-algo list: not the staged data dir"
"$prefix/bin/flagcx-demo" -n 2 >/dev/null || fail "flagcx-demo -n 2 failed"
if [ -x "$prefix/libexec/flagcx/test_allreduce" ] && command -v mpiexec >/dev/null; then
  out=$(mpi_run -n 2 "$prefix/libexec/flagcx/test_allreduce" -b 1K -e 1K -w 1 -n 2 -W 0 -T 0)
  head=${out%%$'\n'*}
  [ "$head" = "# flagcx $version benchmark: allreduce (test_allreduce); FlagCX API $api" ] || fail "benchmark header: '$head'"
  # The README's sample of that header, where it shows one, is this release's.
  readme=$(grep -m1 '^# flagcx .* benchmark: allreduce' "$src/README.md" || true)
  [ -z "$readme" ] || [ "$readme" = "$head" ] || fail "README.md shows '$readme', the benchmark prints '$head'"
fi
pyver=$(find "$stage" -path '*/flagcx/_version.py' -print -quit)
if [ -n "$pyver" ]; then
  grep -qxF "__version__ = \"$version\"" "$pyver" || fail "$pyver: $(cat "$pyver")"
fi

# pkg-config with flagcx.pc alone (no LuaJIT, yaml-cpp or CUDA .pc).
pc=$libdir/pkgconfig/flagcx.pc
! grep -nE 'Requires|luajit|yaml|cuda|=/|-[IL]/' "$pc" || fail "$pc names private dependencies or fixed paths"
[ "$(pkg-config --modversion flagcx)" = "$version" ] || fail "pkg-config --modversion: $(pkg-config --modversion flagcx)"
flags=$(pkg-config --cflags --libs flagcx)
[ "$(pkg-config --static --cflags --libs flagcx)" = "$flags" ] || fail "--static gives other flags"
${CC:-cc} -std=c11 -Wall -Wextra -Werror $san "$src/examples/sendrecv.c" -o "$work/sendrecv" $flags
# A program has no run path of its own: a prefix outside the loader's paths needs LD_LIBRARY_PATH.
out=$(LD_LIBRARY_PATH=$libdir "$work/sendrecv")
[ "$out" = "rank 1 got 1 2 3 4 (no error)" ] || fail "examples/sendrecv.c: $out"
if command -v mpicc >/dev/null && command -v mpiexec >/dev/null; then
  mpicc -std=c11 -Wall -Wextra -Werror $san "$src/examples/mpi_allreduce.c" -o "$work/mpi_allreduce" $flags
  LD_LIBRARY_PATH=$libdir mpi_run -n 2 "$work/mpi_allreduce" | sort | tee "$work/mpi.out"
  [ "$(grep -c ': allreduce of 1024 floats ok$' "$work/mpi.out")" = 2 ] || fail "examples/mpi_allreduce.c"
else
  echo "SKIP examples/mpi_allreduce.c: no mpicc/mpiexec (install libmpich-dev mpich)"
fi

# A CUDA kernel on the device API, built by nvcc from the installed headers
# with pkg-config's flags alone (linked, not run: it needs a GPU).
nvcc=$(command -v nvcc || { [ -x /usr/local/cuda/bin/nvcc ] && echo /usr/local/cuda/bin/nvcc; } || true)
if [ -n "$san" ]; then
  echo "SKIP examples/device_allreduce.cu: a sanitizer build (nvcc links no sanitizer runtime)"
elif [ -n "$nvcc" ] && [ -f "$prefix/include/flagcx_device_unified.h" ]; then
  "$nvcc" -std=c++17 -arch=sm_90 -I"$src/examples" "$src/examples/device_allreduce.cu" \
    -o "$work/device_allreduce" $flags >"$work/nvcc.log" 2>&1 || { cat "$work/nvcc.log"; fail "nvcc examples/device_allreduce.cu"; }
  deps=$(LD_LIBRARY_PATH=$libdir ldd "$work/device_allreduce")
  grep -q "libflagcx.so.*=> $libdir/" <<<"$deps" ||
    fail "examples/device_allreduce.cu does not load the installed libflagcx: $deps"
else
  echo "SKIP examples/device_allreduce.cu: no nvcc or no device headers installed"
fi

# CMake: the example project, and what flagcxConfigVersion.cmake accepts.
if command -v cmake >/dev/null; then
  cmake -S "$src/examples/cmake" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_CXX_FLAGS="$san" >"$work/cmake.log" 2>&1 || { cat "$work/cmake.log"; fail "cmake configure"; }
  grep -qF -- "-- flagcx $version from $libdir/cmake/flagcx" "$work/cmake.log" || fail "cmake found another flagcx: $(cat "$work/cmake.log")"
  cmake --build "$work/cmake" >/dev/null || fail "cmake --build"
  "$work/cmake/flagcx_cmake_example"
  printf 'include("%s")\nmessage("${PACKAGE_VERSION_COMPATIBLE}")\n' "$libdir/cmake/flagcx/flagcxConfigVersion.cmake" >"$work/v.cmake"
  for want in "$version:TRUE" "$major.0:TRUE" "$((major + 1)).0:FALSE" "$major.999:FALSE"; do
    got=$(cmake -DPACKAGE_FIND_VERSION="${want%:*}" -DPACKAGE_FIND_VERSION_MAJOR="${want%%.*}" -P "$work/v.cmake" 2>&1)
    [ "$got" = "${want#*:}" ] || fail "flagcxConfigVersion.cmake: a request for ${want%:*} is compatible=$got"
  done
else
  echo "SKIP examples/cmake: no cmake (install cmake)"
fi

# Meson: the example project finds the install through pkg-config.
meson setup "$work/meson" "$src/examples/meson" --wrap-mode=nodownload \
  ${san:+-Dc_args="$san" -Dc_link_args="$san"} >"$work/meson.log" 2>&1 || { cat "$work/meson.log"; fail "meson setup"; }
grep -q "Run-time dependency flagcx found: YES $version" "$work/meson.log" || fail "meson: $(grep -i flagcx "$work/meson.log")"
ninja -C "$work/meson" >/dev/null
LD_LIBRARY_PATH=$libdir "$work/meson/flagcx_meson_example"

# Uninstall: the install log names every file; nothing is left.
ninja -C "$build" uninstall >/dev/null
left=$(find "$stage" -path "$work" -prune -o ! -type d -print)
[ -z "$left" ] || fail "left after ninja uninstall: $left"
echo "installed, used and uninstalled: OK"
