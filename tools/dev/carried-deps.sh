# Sourced by tools/gpu-check.sh and tools/dev/gpu-perf.sh (from the repository
# root): where LuaJIT / yaml-cpp / GoogleTest development files are missing
# (the device tool's image), unpack the Debian packages carried in
# .carry/gpu-deps/debs under .carry/gpu-deps/root (never into /) and point
# pkg-config and the loader there.
DEBS=.carry/gpu-deps/debs
if [ -d "$DEBS" ] && ! pkg-config --exists luajit yaml-cpp gtest 2>/dev/null; then
  ROOT=$PWD/.carry/gpu-deps/root
  if [ ! -d "$ROOT" ]; then
    mkdir -p "$ROOT"
    for f in "$DEBS"/*.deb; do dpkg -x "$f" "$ROOT"; done
    for pc in "$ROOT"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc; do
      [ -f "$pc" ] || continue  # runtime packages only: no .pc files
      sed -i "s#^\(prefix\|libdir\|includedir\)=/usr#\1=$ROOT/usr#" "$pc"
    done
  fi
  export PKG_CONFIG_PATH=$ROOT/usr/lib/x86_64-linux-gnu/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
  export LD_LIBRARY_PATH=$ROOT/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  if ! command -v pkg-config >/dev/null; then export PKG_CONFIG=$ROOT/usr/bin/pkgconf; fi
  echo "== using carried packages from $ROOT"
fi
