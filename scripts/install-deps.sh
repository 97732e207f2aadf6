#!/bin/sh
# Installs, from Debian's packages, whatever ferry needs to build, test and benchmark and is
# not on this machine yet. Does nothing (and asks for nothing) when all is present.
set -eu
PKGS="build-essential cmake pkg-config clang clang-format libclang-rt-14-dev libcmocka-dev libxxhash-dev
libssl-dev libhiredis-dev redis-server redis-sentinel gnuplot-nox libmimalloc-dev procps libfabric-dev
libfabric-bin openmpi-bin libopenmpi-dev python3-dev python3-numpy python3-pytest python3-setuptools
python3-wheel python3-venv python3-redis prometheus"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
        missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "install-deps: installing$missing"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
