#!/usr/bin/env bash
# examples/meson with this tree as its subproject (subprojects/flagcx, a
# link here), the fallback forced even where an installed flagcx exists:
# dependency('flagcx') must come from the subproject's
# meson.override_dependency, with the example's default_options applied.
#   meson_subproject.sh SOURCE_DIR configure   configure only (the quick suite)
#   meson_subproject.sh SOURCE_DIR build       also build flagcx and run the example
# CUDA is off in both: its kernels take minutes to compile, and the example
# does not use them.
set -euo pipefail
src=$(cd "$1" && pwd)
mode=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "meson_subproject: $*" >&2; exit 1; }
cp "$src/examples/meson/meson.build" "$src/examples/meson/main.c" "$work/"
mkdir "$work/subprojects"
ln -s "$src" "$work/subprojects/flagcx"
meson setup "$work/build" "$work" --force-fallback-for=flagcx -Dflagcx:cuda=disabled \
  --wrap-mode=nodownload >"$work/setup.log" 2>&1 || { cat "$work/setup.log"; fail "meson setup"; }
grep -q "Looking for a fallback subproject for the dependency flagcx" "$work/setup.log" &&
  grep -q "Dependency flagcx found: YES .* (overridden)" "$work/setup.log" ||
  fail "dependency('flagcx') did not come from the subproject: $(grep -i 'flagcx' "$work/setup.log" | head)"
# The example's default_options reached the subproject.
meson introspect --buildoptions "$work/build" | python3 -c '
import json, sys
got = {o["name"]: o["value"] for o in json.load(sys.stdin)}
want = {"flagcx:tests": "disabled", "flagcx:mpi": "disabled", "flagcx:torch": "disabled",
        "flagcx:nccl_dropin": "disabled"}
bad = {k: got.get(k) for k, v in want.items() if got.get(k) != v}
sys.exit(f"default_options not applied: {bad}" if bad else 0)'
echo "subproject configured: dependency('flagcx') from subprojects/flagcx, default_options applied"
if [ "$mode" = build ]; then
  ninja -C "$work/build" >"$work/build.log" 2>&1 || { tail -30 "$work/build.log"; fail "ninja"; }
  env -u FLAGCX_DATA_DIR "$work/build/flagcx_meson_example"
fi
