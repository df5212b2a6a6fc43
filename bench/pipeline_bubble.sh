#!/usr/bin/env bash
# Measured pipeline idle share per stage, 1f1b against zb-h1, on the same job:
# the benchmark GPT (bench/gpt_bench.yaml) at pp 2 under mpirun, one rank per
# core, 8 micro-batches of 2 sequences per step. Prints each stage's median
# share of the step spent waiting (the metrics' pipeline record, steps 3 to
# STEPS) and the step time for both schedules, then zb-h1's idle share as a
# fraction of 1f1b's.
#   bash bench/pipeline_bubble.sh [STEPS] [LOOM]
set -euo pipefail
STEPS="${1:-12}"
LOOM="${2:-build/loom}"
HERE="$(cd "$(dirname "$0")" && pwd)"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for schedule in 1f1b zb-h1; do
  mpirun --oversubscribe -np 2 -x OMP_NUM_THREADS=1 "$LOOM" train "$HERE/gpt_bench.yaml" \
    --run-dir "$WORK/$schedule" --set train.steps="$STEPS" --set train.global_batch_size=16 \
    --set train.micro_batch_size=2 --set parallel.pp=2 --set parallel.schedule="$schedule" \
    --set log.interval=1 > "$WORK/$schedule.log" 2>&1 || { cat "$WORK/$schedule.log"; exit 1; }
done
python3 - "$WORK" <<'PY'
import json, statistics, sys
work = sys.argv[1]
idle = {}
for schedule in ("1f1b", "zb-h1"):
    records = [json.loads(line) for line in open(f"{work}/{schedule}/metrics.jsonl")]
    records = [r for r in records if "pipeline" in r and r["step"] >= 3]
    stages = len(records[0]["pipeline"]["stage_idle"])
    idle[schedule] = [statistics.median(r["pipeline"]["stage_idle"][s] for r in records) for s in range(stages)]
    step_ms = statistics.median(r["step_ms"] for r in records)
    print(f"{schedule:6s} idle share per stage: " + " ".join(f"{x:.3f}" for x in idle[schedule])
          + f" | formula bubble {records[0]['pipeline']['bubble_formula']:.3f} | median step {step_ms:.0f} ms")
ratio = [z / o for z, o in zip(idle["zb-h1"], idle["1f1b"])]
print("zb-h1 / 1f1b idle share per stage: " + " ".join(f"{x:.2f}" for x in ratio))
PY
