#!/usr/bin/env bash
# bench/gpu/check.sh, the single-GPU checks the GPU machine runs, dry: its GPU side mapped to the
# CPU (LOOM_GPU_CHECK_DEVICE=cpu) and 4 steps a run, so that every path of the script (the CPU/GPU
# pairs in fp32 and bf16, GPT and Llama, recomputation, resuming on the device and on the CPU,
# dropout, the mixtures of experts, data.eod_mask_loss, the CUDA kernels' unit tests) runs in CI on a machine without a GPU:
# all 16 checks pass, and
# a pair that differs fails.
source "$(dirname "$0")/common.sh"
check() { (cd "$LOOM_SOURCE" && LOOM_GPU_CHECK_DEVICE=cpu LOOM_GPU_CHECK_STEPS=4 WORK="$WORK/gpu" bash bench/gpu/check.sh "$@"); }
check > "$WORK/check.log" 2>&1 || { cat "$WORK/check.log"; fail "bench/gpu/check.sh's dry run failed"; }
grep -q "^gpu_check: 16 passed, 0 failed$" "$WORK/check.log" || { cat "$WORK/check.log"; fail "not 16 checks passed"; }
# The comparison can fail: a GPU side on another seed is caught.
LOOM_GPU_CHECK_ONLY=fp32 LOOM_GPU_CHECK_EXTRA="--set train.seed=7" check > "$WORK/seeded.log" 2>&1 && { cat "$WORK/seeded.log"; fail "a GPU side on another seed passed"; }
grep -q "^FAIL fp32: " "$WORK/seeded.log" || { cat "$WORK/seeded.log"; fail "the fp32 pair should fail on another seed"; }
echo "gpu_check_dry_run: ok"
