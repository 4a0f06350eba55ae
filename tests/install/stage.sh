# Sourced by the tests that build against an installed flagcx: one staged
# install (meson install --destdir) of a build folder into a fresh temporary
# folder, removed when the test exits.  The build's install log
# (meson-logs/install-log.txt, what `ninja uninstall` removes) is put back as
# it was, so a test never makes the user's own install unremovable.
#   stage_install BUILD_DIR   sets stage (the temporary folder), prefix (the
#                             configured prefix inside it), libdir (its
#                             library folder) and san (the compiler flags a
#                             sanitized libflagcx needs in its programs)
stage_install() {
  local build=$1 log=$1/meson-logs/install-log.txt
  stage=$(mktemp -d)
  local restore="rm -f '$log'"
  if [ -f "$log" ]; then
    cp "$log" "$stage.install-log"
    restore="mv '$stage.install-log' '$log'"
  fi
  trap "$restore; rm -rf '$stage'" EXIT
  meson install -C "$build" --destdir "$stage" --no-rebuild --quiet >/dev/null
  local opts
  opts=$(meson introspect --buildoptions "$build" | python3 -c '
import json, sys
o = {x["name"]: x["value"] for x in json.load(sys.stdin)}
print(o["prefix"], o["libdir"])')
  prefix=$stage${opts% *}
  libdir=$prefix/${opts#* }
  san=
  local deps
  deps=$(ldd "$libdir/libflagcx.so")  # whole output first: grep -q would cut ldd short
  case "$deps" in *libasan*) san="-fsanitize=address,undefined" ;; esac
}
