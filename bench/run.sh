#!/usr/bin/env bash
# The benchmark's one entry point: builds what it needs (scripts/setup.sh),
# then runs loom beside PyTorch and a minimal LibTorch loop and prints the
# table; the figures go to bench/results.json. Arguments go to bench/run.py
# (--steps, --warmup-steps, --worlds, --output).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh > /dev/null
exec python3 bench/run.py "$@"
