#!/usr/bin/env bash
# Install the Debian packages flagcx builds and tests with (only what is missing).
set -euo pipefail
pkgs=(meson ninja-build pkg-config cmake g++ libluajit-5.1-dev libyaml-cpp-dev libgtest-dev
      libgmock-dev googletest libmpich-dev mpich libibverbs-dev librdmacm-dev graphviz
      python3-matplotlib iproute2 util-linux python3-torch libtorch-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "flagcx: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
