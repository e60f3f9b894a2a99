#!/usr/bin/env bash
# One command for newcomers: install what is missing (Debian 12), build, run the demo.
# Set ZK_HOSTS=host:port to use an existing ZooKeeper instead of a throwaway local one.
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)" >/dev/null
exec lua5.4 examples/demo.lua
