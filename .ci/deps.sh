#!/usr/bin/env bash
# Install everything zklock needs to build, test, demo and benchmark on Debian 12.
# Idempotent: skips apt when every package is already installed.
set -euo pipefail
PKGS=(
  build-essential cmake pkg-config
  libzookeeper-st-dev zookeeper default-jre-headless socat
  lua5.4 liblua5.4-dev luajit2 libluajit2-5.1-dev lua-busted luarocks lua-argparse
  lua5.1 liblua5.1-0-dev lua5.2 liblua5.2-dev lua5.3 liblua5.3-dev
  clang libclang-rt-14-dev valgrind clang-format lua-check
  libcurator-recipes-java python3-kazoo python3
  lua-cqueues lua-luv
  nginx-core libnginx-mod-http-lua lua-resty-core curl
  wrk python3-matplotlib
  procps iproute2 util-linux bsdutils strace
)
missing=()
for p in "${PKGS[@]}"; do
  [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "installing: ${missing[*]}" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
