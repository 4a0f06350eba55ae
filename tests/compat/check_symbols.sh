#!/usr/bin/env bash
# The public headers, libflagcx.so and docs/COMPATIBILITY.md agree:
#  1. every function the headers declare is exported by the library;
#  2. every exported flagcx*/Flagcx*/getFlagcx* symbol is declared in a header;
#  3. COMPATIBILITY.md names every declared function and every FLAGCX_*
#     variable that src/base/param_list.h declares, and declares every
#     variable it lists.
# usage: check_symbols.sh LIBFLAGCX SOURCE_ROOT
set -euo pipefail
lib=$1
root=$2
doc=$root/docs/COMPATIBILITY.md
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Function names a preprocessed header declares: a flagcx-ish identifier
# followed by "(" that does not open a "(*slot)" function-pointer field.
declared() {
  tr '\n' ' ' | grep -oE '\b(flagcx|Flagcx|getFlagcx)[A-Za-z0-9_]*[[:space:]]*\([^*]' |
    sed -E 's/[[:space:]]*\(.*//' | grep -vE '_t$' | sort -u
}
{
  ${CC:-cc} -E -P -I"$root/include" -x c "$root/include/flagcx.h" | declared
  ${CC:-cc} -E -P -I"$root/include" -x c "$root/include/flagcx_kernel.h" | declared
  ${CC:-cc} -E -P -I"$root/include" -x c "$root/include/flagcx_device_unified.h" | declared
  ${CXX:-c++} -std=c++17 -E -P -I"$root/include" -x c++ "$root/include/flagcx_kernel.h" | declared
  ${CXX:-c++} -std=c++17 -E -P -I"$root/include" -x c++ "$root/include/flagcx_p2p.h" |
    sed -n '/FLAGCX_P2P_MSG_SIZE\|struct FlagcxP2pRdmaDesc/,$p' | declared
} | sort -u > "$tmp/declared.all"
# Inline helpers the header defines are not exported.
grep -vxE 'flagcxP2pSerializeRdmaDesc|flagcxP2pDeserializeRdmaDesc' "$tmp/declared.all" > "$tmp/declared"
nm -D --defined-only -C "$lib" | awk '$2 ~ /^[TW]$/ { $1 = ""; $2 = ""; print }' |
  sed -E 's/^ +//; s/\(.*//' | grep -E '^(flagcx|Flagcx|getFlagcx)[A-Za-z0-9_]*$' | sort -u > "$tmp/exported"
fail=0
missing=$(comm -23 "$tmp/declared" "$tmp/exported")
if [ -n "$missing" ]; then echo "declared in include/ but not exported by $lib:"; echo "$missing"; fail=1; fi
extra=$(comm -13 "$tmp/declared" "$tmp/exported")
if [ -n "$extra" ]; then echo "exported by $lib but declared in no public header:"; echo "$extra"; fail=1; fi
while read -r f; do
  grep -q "\`$f\`" "$doc" || { echo "COMPATIBILITY.md does not list \`$f\`"; fail=1; }
done < "$tmp/declared"
sed -nE 's/^X\(([A-Z0-9_]+),.*/FLAGCX_\1/p' "$root/src/base/param_list.h" | sort -u > "$tmp/vars"
while read -r v; do
  grep -q "\`$v\`" "$doc" || { echo "COMPATIBILITY.md does not list \`$v\`"; fail=1; }
done < "$tmp/vars"
grep -oE '`FLAGCX_[A-Z0-9_]+`' "$doc" | tr -d '`' | sort -u > "$tmp/docvars"
undeclared=$(comm -23 "$tmp/docvars" "$tmp/vars" | grep -vxE 'FLAGCX_VERSION_(MAJOR|MINOR|PATCH|CODE)|FLAGCX_P2P_(MSG|DESC|IPC_INFO)_SIZE|FLAGCX_WIN_[A-Z_]+|FLAGCX_PTR_[A-Z]+|FLAGCX_UNIQUE_ID_BYTES|FLAGCX_DEV_COMM_REQUIREMENTS_INITIALIZER|FLAGCX_FIFO_CAPACITY|FLAGCX_DEVICE_CTA_COUNT|FLAGCX_DEVICE_THREADS_PER_CTA|FLAGCX_VENDOR_[A-Z_]+|FLAGCX_SLICE_OP_[A-Z]+' || true)
if [ -n "$undeclared" ]; then echo "COMPATIBILITY.md lists variables src/base/param_list.h does not declare:"; echo "$undeclared"; fail=1; fi
n=$(wc -l < "$tmp/declared")
[ "$fail" = 0 ] && echo "$n public functions: declared, exported and documented"
exit $fail
