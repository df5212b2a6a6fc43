#!/usr/bin/env bash
# The step-time hiccup of a checkpoint save, sync against async (checkpoint.async: true).
# A GPT of ~86M parameters (12 layers, hidden 768; ~1 GB of checkpoint with AdamW's moments)
# trains STEPS steps at small batch, saving every INTERVAL, once each way. Printed per mode: the
# median step time, the time the step loop stood still for each save (metrics.jsonl's
# checkpoint_ms: the whole write when sync, the copy to host memory when async), and the run's
# wall time. Usage: bash bench/checkpoint_hiccup.sh [STEPS [INTERVAL]]   (LOOM=path/to/loom)
set -euo pipefail
cd "$(dirname "$0")/.."
steps="${1:-16}"
interval="${2:-4}"
LOOM="${LOOM:-build/loom}"
work="$(mktemp -d "${TMPDIR:-/tmp}/loom-hiccup.XXXXXX")"
trap 'rm -rf "$work"' EXIT
for mode in false true; do
  start=$(date +%s.%N)
  "$LOOM" train bench/gpt_bench.yaml --run-dir "$work/run_$mode" --set model.num_layers=12 --set model.hidden_size=768 \
    --set model.num_heads=12 --set model.seq_len=128 --set train.global_batch_size=2 --set train.micro_batch_size=2 \
    --set train.steps="$steps" --set train.warmup_steps=1 --set checkpoint.dir="$work/ck_$mode" \
    --set checkpoint.interval="$interval" --set checkpoint.keep=1 --set checkpoint.async=$mode > "$work/log_$mode" 2>&1 ||
    { cat "$work/log_$mode"; exit 1; }
  end=$(date +%s.%N)
  python3 - "$work/run_$mode/metrics.jsonl" "$mode" "$start" "$end" "$(du -sm "$work/ck_$mode"/step_* | tail -1 | cut -f1)" << 'PY'
import json, statistics, sys
path, mode, start, end, megabytes = sys.argv[1:]
records = [json.loads(line) for line in open(path)]
steps = statistics.median(r["step_ms"] for r in records[1:])
saves = [round(r["checkpoint_ms"]) for r in records if "checkpoint_ms" in r]
print(f"checkpoint.async {mode:5}: median step {steps:7.0f} ms | step loop stood still {saves} ms per save "
      f"(~{megabytes} MB each) | run {float(end) - float(start):6.1f} s")
PY
done
