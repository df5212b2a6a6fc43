#!/usr/bin/env bash
# The benchmark's one entry point: builds what it needs (scripts/setup.sh: the torch wheel in
# .venv/ and loom; then the all-reduce sweep and the minimal loop), runs loom beside PyTorch 2.x
# eager and torch.compile on that wheel, and prints the table; the figures go to
# bench/results.json. Arguments go to bench/run.py (--steps, --warmup-steps, --worlds, --models,
# --shapes, --torch-threads, --torch-malloc, --minimal-loop, --no-communication, --output).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh > /dev/null
cmake --build build -j "${LOOM_BUILD_JOBS:-2}" --target loom_bench_allreduce loom_bench_minimal > /dev/null ||
  echo "bench: the all-reduce sweep or the minimal loop did not build; run.py skips what is missing" >&2
exec .venv/bin/python bench/run.py "$@"
