#!/usr/bin/env bash
# README command 2 (and CI): set up what the tests need too, build everything, run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --tests
export OMP_NUM_THREADS=1
ctest --test-dir build --output-on-failure -j 2 "$@"
