#!/usr/bin/env bash
# README command 2 (and CI): set up, build, and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export OMP_NUM_THREADS=1
ctest --test-dir build --output-on-failure -j 2 "$@"
