#!/usr/bin/env bash
# One device-tool call's worth of GPU work, from the repository root on the GPU machine,
# carrying .gpu_carry (bench/gpu/carry.sh, run here after the README's build: the binary the
# CPU suite tested, with its Debian libraries). No build on the GPU machine: bench/gpu/env.sh
# points the loader at that machine's own torch wheel. Steps, each bounded by a timeout so that
# one failure leaves the others' logs:
#   1. versions, and ldd: every library found, LibTorch and CUDA from the wheel there;
#   2. bench/gpu/check.sh: the tiny GPT and Llama on the GPU against the CPU (SKIP_CHECK=1: not);
#   3. bench/gpu/run.sh for the 1.3B GPT, then the 1B Llama: loom, PyTorch eager and
#      torch.compile on the same GPU (SKIP_BENCH=1: not; BENCH_CONFIGS: others; SKIP_COMPILE=1: eager only);
#   3a. LOOM_ONLY_CONFIGS: those models, loom's side only; BASELINE_CONFIGS: likewise with
#       .gpu_carry/loom_baseline (an earlier binary, bench/gpu/carry.sh BASELINE=...);
#   3b. WARMUP_RUN=1: the 1.3B GPT with a 10-step warm-up (its loss jump at step 7 with 2);
#   4. two steps of the 1.3B GPT (PROFILE_CONFIGS: others) under LibTorch's profiler
#      (log.profile_step_start/end): the kernels that took the GPU's time, and the trace in
#      $OUT/profile_NAME.json.gz (SKIP_PROFILE=1: not).
# Everything it prints is also in $OUT/session.log; the runs' logs come back in $OUT/logs.tgz.
# The call: device run --carry .gpu_carry --timeout_s 560 'bash bench/gpu/session.sh'
# A step whose timeout would end past SESSION_BUDGET seconds (default 540) from the start is skipped,
# saying so, so that the call ends with its logs inside the device's 600 s per command. All steps
# take about 7 minutes on an H200 (check.sh 60 s, each benchmark 2 to 3.5 minutes with
# torch.compile), which one session's 15 device minutes hold once, start-up included, not twice.
# So a session with a new binary starts with the cheap call (about 2.5 minutes), then spends
# what is left on the benchmarks:
#   SKIP_BENCH=1 SKIP_PROFILE=1 LOOM_ONLY_CONFIGS="bench/gpu/moe_1b.yaml bench/gpu/llama_1b.yaml bench/gpu/gpt_1.3b.yaml"
#   SKIP_CHECK=1 SKIP_PROFILE=1 SKIP_COMPILE=1   (both benchmarks against PyTorch eager)
set -uo pipefail
cd "$(dirname "$0")/../.."
started=$SECONDS
# fits SECONDS_NEEDED WHAT: whether a step bounded by that timeout ends inside SESSION_BUDGET; says so when not.
fits() {
  if ((SECONDS - started + $1 + 15 > ${SESSION_BUDGET:-540})); then  # (+15: bounded's kill grace)
    echo "== skipped, $2: its timeout of $1 s would pass SESSION_BUDGET ${SESSION_BUDGET:-540} s ($((SECONDS - started)) s gone)"
    return 1
  fi
}
# SIGTERM asks loom to finish its step and stop: -k kills a step that never ends.
bounded() { timeout -k 15 "$@"; }
out=${OUT:-/tmp/loom_gpu_session}
mkdir -p "$out"
exec > >(tee "$out/session.log") 2>&1
source bench/gpu/env.sh
sets=()  # BENCH_SETS: "key=value ..." for every loom run of the benchmark and the profile
for s in ${BENCH_SETS:-}; do sets+=(--set "$s"); done
pack() { tar czf "$out/logs.tgz" --exclude='*.pt' --exclude='*.bin' --exclude='profile_rank0.json' -C / tmp/loom_gpu_check tmp/loom_gpu_bench 2> /dev/null; }
trap pack EXIT
echo "== $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader)"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())'
echo "cores $(nproc) | $(ldd --version | head -1) | $(nvcc --version 2> /dev/null | tail -1)"
echo "== ldd"
ldd "$LOOM" | grep -E "torch|c10|cudart|nccl|gomp|yaml|not found"
if ldd "$LOOM" | grep -q "not found"; then
  echo "a library was not found: stopping"
  exit 1
fi
"$LOOM" --version 2>&1 | head -3
echo "== smoke: 3 steps of the tiny GPT on the GPU"
rm -rf /tmp/loom_smoke
bounded 60 "$LOOM" train configs/gpt_tiny.yaml --run-dir /tmp/loom_smoke --set train.device=cuda --set train.steps=3 --set train.warmup_steps=1 \
  --set log.interval=1 2>&1 | tail -15
smoke=${PIPESTATUS[0]}
if [ "$smoke" != 0 ]; then
  echo "the smoke run failed (exit $smoke): stopping before the device time goes on the rest"
  exit 1
fi
if [ "${SKIP_CHECK:-0}" != 1 ] && fits "${CHECK_TIMEOUT:-150}" check.sh; then
  echo "== bench/gpu/check.sh"
  WORK=/tmp/loom_gpu_check bounded "${CHECK_TIMEOUT:-150}" bash bench/gpu/check.sh
fi
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  for config in ${BENCH_CONFIGS:-bench/gpu/gpt_1.3b.yaml bench/gpu/llama_1b.yaml}; do
    name=$(basename "$config" .yaml)
    fits "${BENCH_TIMEOUT:-230}" "bench/gpu/run.sh --config $config" || continue
    echo "== bench/gpu/run.sh --config $config"
    mkdir -p "/tmp/loom_gpu_bench/$name"
    # 230 s: the Llama's torch.compile side compiles for about a minute in its first step, and at
    # 170 s it did not finish on an H200 (2026-11-28, call 6).
    OUT="/tmp/loom_gpu_bench/$name" bounded "${BENCH_TIMEOUT:-230}" bash bench/gpu/run.sh --config "$config" ${BENCH_SETS:-}
    cp "/tmp/loom_gpu_bench/$name"/results*.json "$out/" 2> /dev/null
  done
fi
# loom's side alone, the median tokens/s of steps 3 on: loom_only LABEL BINARY CONFIG...
loom_only() {
  local label=$1 binary=$2
  shift 2
  for config in "$@"; do
    name=$(basename "$config" .yaml)
    fits "${BASELINE_TIMEOUT:-90}" "$label: $config" || continue
    echo "== $label: $config"
    rm -rf "/tmp/loom_gpu_bench/${label}_$name"
    bounded "${BASELINE_TIMEOUT:-90}" "$binary" train "$config" --run-dir "/tmp/loom_gpu_bench/${label}_$name" \
      "${sets[@]}" 2>&1 | grep -E "MFU|error|Error" | tail -2
    python3 -c 'import json, os, statistics, sys
path = sys.argv[1]
steps = [json.loads(l) for l in open(path)] if os.path.exists(path) else []
if len(steps) < 3:
    print(sys.argv[2], "no median: the run left", len(steps), "steps")
else:
    print(sys.argv[2], "median tokens/s (steps 3+):", round(statistics.median(s["tokens_per_s"] for s in steps[2:])))' \
      "/tmp/loom_gpu_bench/${label}_$name/metrics.jsonl" "$label"
  done
}
# LOOM_ONLY_CONFIGS: those models with this binary, loom's side only (no PyTorch beside it).
[ -z "${LOOM_ONLY_CONFIGS:-}" ] || loom_only loom "$LOOM" $LOOM_ONLY_CONFIGS
# BASELINE_CONFIGS: the same with an earlier binary (bench/gpu/carry.sh BASELINE=...), in the same
# call on the same GPU: what a change did, machine for machine.
if [ -x .gpu_carry/loom_baseline ] && [ -n "${BASELINE_CONFIGS:-}" ]; then
  loom_only "baseline_$(cat .gpu_carry/loom_baseline.commit 2> /dev/null)" .gpu_carry/loom_baseline $BASELINE_CONFIGS
fi
if [ "${WARMUP_RUN:-0}" = 1 ] && fits "${WARMUP_TIMEOUT:-80}" "the warm-up run"; then
  # The GPT's loss jump at step 7 (docs/performance.md): the same run with a 10-step warm-up.
  # An optimisation spike from the 2-step warm-up's large first Adam updates goes away with it.
  echo "== GPT 1.3B, warm-up 10 steps instead of 2"
  rm -rf /tmp/loom_gpu_bench/gpt_warmup10  # a rerun on the same machine: loom refuses a directory holding a run
  bounded "${WARMUP_TIMEOUT:-80}" "$LOOM" train bench/gpu/gpt_1.3b.yaml --run-dir /tmp/loom_gpu_bench/gpt_warmup10 \
    --set train.warmup_steps=10 "${sets[@]}" 2>&1 | grep -E "step +[0-9]+/|error|Error" | cut -c1-110
fi
if [ "${SKIP_PROFILE:-0}" != 1 ]; then
  # Two steps of each model under LibTorch's profiler: the kernels that took the most time.
  for config in ${PROFILE_CONFIGS:-bench/gpu/gpt_1.3b.yaml}; do
    name=$(basename "$config" .yaml)
    fits "${PROFILE_TIMEOUT:-90}" "profile: $config" || continue
    echo "== profile: $config, steps 3-4"
    rm -rf "/tmp/loom_gpu_bench/profile_$name"
    bounded "${PROFILE_TIMEOUT:-90}" "$LOOM" train "$config" --run-dir "/tmp/loom_gpu_bench/profile_$name" \
      --set train.steps=4 --set train.warmup_steps=1 --set log.profile_step_start=3 --set log.profile_step_end=4 \
      "${sets[@]}" 2>&1 | grep -E "profile:|step [0-9]+/4|error|Error"
    gzip -c "/tmp/loom_gpu_bench/profile_$name/profile_rank0.json" > "$out/profile_$name.json.gz" 2> /dev/null
  done
fi
echo "== done $(date -u +%FT%TZ)"
