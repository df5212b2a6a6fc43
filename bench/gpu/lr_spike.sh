#!/usr/bin/env bash
# The third device-tool call of 2026-11-27 (carrying .gpu_carry, 99 s on an H100): the GPT 1.3B's
# step-7 loss jump against the learning rate and the precision (8 steps: the cosine has decayed
# the lr by step 6), then two profiled steps of the MoE 1.6B. docs/performance.md has the figures.
set -uo pipefail
cd "$(dirname "$0")/../.."
source bench/gpu/env.sh
out=${OUT:-/tmp/loom_gpu_lr_spike}
mkdir -p "$out"
steps() { grep -E "step +[0-9]+/|rror|profile:" | cut -c1-118; }
rm -rf /tmp/lr_spike_fp32 /tmp/lr_spike_bf16 /tmp/lr_spike_moe  # loom refuses a directory holding a run
echo "== fp32 GPT 1.3B, 8 steps, micro-batch 2"
timeout 80 "$LOOM" train bench/gpu/gpt_1.3b.yaml --run-dir /tmp/lr_spike_fp32 --set train.steps=8 \
  --set train.precision=fp32 --set train.micro_batch_size=2 2>&1 | steps
echo "== bf16 GPT 1.3B, 8 steps"
timeout 45 "$LOOM" train bench/gpu/gpt_1.3b.yaml --run-dir /tmp/lr_spike_bf16 --set train.steps=8 2>&1 | steps
echo "== the MoE 1.6B, steps 3-4 profiled"
timeout 55 "$LOOM" train bench/gpu/moe_1b.yaml --run-dir /tmp/lr_spike_moe --set train.steps=4 \
  --set log.profile_step_start=3 --set log.profile_step_end=4 2>&1 | steps
cp /tmp/lr_spike_fp32/metrics.jsonl "$out/fp32.jsonl"
cp /tmp/lr_spike_bf16/metrics.jsonl "$out/bf16.jsonl"
gzip -c /tmp/lr_spike_moe/profile_rank0.json > "$out/profile_moe.json.gz"
