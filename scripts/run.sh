#!/usr/bin/env bash
# README command 1: set up, build, and train the default small GPT on CPU.
# Extra arguments go to `loom train`, e.g. --set train.steps=50.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec build/loom train configs/gpt_tiny.yaml "$@"
