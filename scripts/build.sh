#!/usr/bin/env bash
# Configures and builds b3os into build/ (binaries in build/bin). Pass extra CMake flags as arguments.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${B3OS_JOBS:-$(nproc)}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
ninja -C build -j"$jobs"
