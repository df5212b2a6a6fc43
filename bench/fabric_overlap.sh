#!/usr/bin/env bash
# Whether the data-parallel reductions' later steps overlap backward: HSDP's all-reduce across the
# replicas and the two-level collectives' second level, which run on a thread of their own over
# Gloo (parallel/later_steps.h) as soon as their first step is done. The README's small GPT
# (configs/gpt_tiny.yaml) at dp 4 on 2 nodes x 2 ranks (scripts/fabric.sh) with a link between the
# nodes fast enough (default 1000 Mbit/s) that a step's reduction across it takes about as long as
# backward, gradients in buckets of 0.25 MB (so the first ones are reduced while backward still
# computes the rest), 30 steps, each way: flat ZeRO-1, hierarchical ZeRO-0 and ZeRO-1, HSDP ZeRO-1
# and ZeRO-3 (parallel.dp_shard 2). Per variant: the median step of steps 11-30, and the dp
# collectives' exposed time per step (metrics.jsonl's time_split, rank 0: the training thread's
# time blocked in dp, dp-shard and dp-replicate). Run it with two builds (LOOM=...) to compare them.
# Needs root (network namespaces).
#   LOOM=build/loom bash bench/fabric_overlap.sh [OUT_DIR] [INTER_MBIT]      # about 3 minutes
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-/tmp/loom-fabric-overlap}"
MBIT="${2:-1000}"
LOOM="${LOOM:-build/loom}"
mkdir -p "$OUT"
COMMON=(--set parallel.bucket_mb=0.25 --set train.steps=30 --set train.micro_batch_size=4 --set log.interval=10)
run() {  # run NAME [--set ...]
  local name="$1"
  shift
  rm -rf "${OUT:?}/$name"
  scripts/fabric.sh --nodes 2 --ranks-per-node 2 --inter-mbit "$MBIT" -- "$LOOM" train configs/gpt_tiny.yaml \
    --run-dir "$OUT/$name" "${COMMON[@]}" "$@" > "$OUT/$name.log" 2>&1 || { tail -20 "$OUT/$name.log"; exit 1; }
}
run zero1_flat --set parallel.zero_stage=1
run zero0_hierarchical --set parallel.dp_collectives=hierarchical
run zero1_hierarchical --set parallel.zero_stage=1 --set parallel.dp_collectives=hierarchical
run zero1_hsdp --set parallel.zero_stage=1 --set parallel.dp_shard=2
run zero3_hsdp --set parallel.zero_stage=3 --set parallel.dp_shard=2
python3 - "$OUT" "$LOOM" "$MBIT" <<'PY'
import json, statistics, sys
out, loom, mbit = sys.argv[1:]
print(f"{loom} at {mbit} Mbit/s between nodes")
print(f"{'variant':<20} {'step ms':>8} {'exposed dp ms':>14}")
for name in ["zero1_flat", "zero0_hierarchical", "zero1_hierarchical", "zero1_hsdp", "zero3_hsdp"]:
    m = [json.loads(l) for l in open(f"{out}/{name}/metrics.jsonl") if l.strip()]
    step = statistics.median(r["step_ms"] for r in m if r["step"] > 10)
    split = [r["time_split"] for r in m if "time_split" in r][-1]
    dp_ms = sum(v for k, v in split["exposed_ms"].items() if k.startswith("dp"))
    print(f"{name:<20} {step:>8.1f} {dp_ms:>14.1f}")
PY
