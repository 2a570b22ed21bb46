#!/usr/bin/env bash
# The whole test suite: release build + every ctest test, then the
# sanitizer build (ASan + UBSan) over the unit, kernel and fuzz-replay tests.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

echo "== release build: all tests"
(cd build/release && ctest --output-on-failure -j "$jobs")

echo "== asan+ubsan build: unit, kernels, fuzz"
cmake --preset asan >/dev/null
cmake --build --preset asan -j "$jobs"
(cd build/asan && ctest -L 'unit|kernels|fuzz' --output-on-failure -j "$jobs")
