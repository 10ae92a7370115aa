#!/usr/bin/env bash
# Installs the Debian packages OctoPipe builds and tests with, only those missing.
# apt-get update runs at most once, and only when something must be installed.
set -eu
pkgs=(
  build-essential cmake pkg-config
  g++                  # the device emulator builds the kernel modules (runtime/dev/dev_emu.c)
  libyaml-dev          # frontend
  llvm-dev             # codegen (LLVM C API, llvm-config)
  check                # unit tests
  openmpi-bin libopenmpi-dev   # CPU runtime transport
  libopenblas-dev      # CPU kernels
  patchelf             # the GPU kit's run paths (tests/gpu/kit.sh)
)
missing=()
for p in "${pkgs[@]}"; do
  st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [ "$st" = "install ok installed" ] || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "install-deps: installing ${missing[*]}" >&2
SUDO=
[ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
