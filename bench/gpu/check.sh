#!/usr/bin/env bash
# Single-GPU checks of the CUDA path, run on the GPU machine after bench/gpu/build.sh
# (one loom binary runs both sides, so only the device differs):
#  1. fp32: the small GPT on the GPU gives the CPU's losses step by step (rtol 1e-4:
#     cuBLAS and SDPA sum in other orders than the CPU kernels; TF32 stays off).
#  2. the same with gradient accumulation and full and selective recomputation.
#  3. bf16 on the GPU against bf16 on the CPU (rtol 2e-2: bf16 rounds at 3 digits).
#     The Llama (configs/llama_tiny.yaml) in fp32 and bf16 likewise.
#  4. A checkpoint saved on the GPU and resumed: losses bit-identical to the uninterrupted
#     GPU run; the checkpoint then resumes on the CPU (rtol 1e-4).
#     The loss masked after an end-of-document id (data.eod_mask_loss), fp32.
#  5. dropout (masks from the CPU's generators on both sides: rtol 1e-4), and mixtures of experts:
#     GPT's and DeepSeek-V3's in small, fp32 (1e-4, up to a routing near-tie) and bf16 (2e-2).
#  6. loom's CUDA kernels (fused cross-entropy and SwiGLU) against LibTorch's composed ones: the
#     unit tests tagged [cuda] (tests/test_cuda_kernels.cpp), from the unit-test binary beside loom
#     (bench/gpu/carry.sh carries it), with LOOM_REQUIRE_GPU=1 so that no GPU is a failure.
# (ZeRO shards over dp x cp, so one GPU cannot check it: at world 1 it is off.)
# Prints PASS/FAIL per check and "N passed, M failed" last; exit 1 if any failed.
# The dry run (tests/scripts/gpu_check_dry_run.sh, in ctest): LOOM_GPU_CHECK_DEVICE=cpu maps the GPU
# side to the CPU, and LOOM_GPU_CHECK_STEPS shortens the runs, so that CI runs this script's every
# path on a machine without a GPU; LOOM_GPU_CHECK_EXTRA adds arguments to the GPU side's runs
# (the dry run sets another seed there to see a pair fail), and LOOM_GPU_CHECK_ONLY=NAME runs that
# check alone.
set -uo pipefail
cd "$(dirname "$0")/../.."
export LD_LIBRARY_PATH=/tmp/loom_deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
loom=${LOOM:-build-gpu/loom}
work=${WORK:-/tmp/loom_gpu_check}
rm -rf "$work" && mkdir -p "$work"
passed=0 failed=0
gpu=${LOOM_GPU_CHECK_DEVICE:-cuda}
steps=${LOOM_GPU_CHECK_STEPS:-30}
half=$((steps / 2))
BASE=(--set train.steps=$steps --set train.warmup_steps=$((steps / 6)) --set log.interval=$((steps / 3)))

run() {  # run NAME [loom train args...]
  local name=$1
  shift
  if ! "$loom" train "${CONFIG:-configs/gpt_tiny.yaml}" --run-dir "$work/$name" "${BASE[@]}" "$@" > "$work/$name.log" 2>&1; then
    echo "run $name failed:"
    tail -20 "$work/$name.log"
    return 1
  fi
}
check() {  # check NAME COMMAND...: one line of PASS or FAIL
  local name=$1
  shift
  [ -z "${LOOM_GPU_CHECK_ONLY:-}" ] || [ "$name" = "$LOOM_GPU_CHECK_ONLY" ] || return 0
  local out
  if out=$("$@" 2>&1); then
    passed=$((passed + 1))
    echo "PASS $name: $(echo "$out" | tail -1)"
  else
    failed=$((failed + 1))
    echo "FAIL $name: $out"
  fi
}
same() {  # same A B RTOL: the loss of every step of run A within RTOL of run B's
  python3 tests/scripts/compare_metrics.py "$work/$1/metrics.jsonl" "$work/$2/metrics.jsonl" --rtol "$3"
}
pair_runs() {  # pair_runs NAME RTOL [args...]: the run on the CPU and on the GPU agree
  local name=$1 rtol=$2
  shift 2
  run "${name}_cpu" --set train.device=cpu "$@" && run "${name}_gpu" --set train.device="$gpu" "$@" ${LOOM_GPU_CHECK_EXTRA:-} &&
    same "${name}_gpu" "${name}_cpu" "$rtol"
}
pair() { check "$1" pair_runs "$@"; }

pair fp32 1e-4
pair fp32_accumulation_recompute_full 1e-4 --set train.micro_batch_size=2 --set train.recompute=full
pair fp32_recompute_selective 1e-4 --set train.recompute=selective
pair bf16 2e-2 --set train.precision=bf16
# data.eod_mask_loss: ignored targets through the fused cross-entropy's -100 rows; id 180 is 17% of
# gpt_tiny's synthetic corpus (seed 1234); one sample per micro-batch.
pair eod_mask_fp32 1e-4 --set data.eod_mask_loss=true --set data.eod_id=180 --set train.micro_batch_size=1
# The Llama (RMSNorm, SwiGLU, RoPE, grouped-query attention through SDPA's kv heads).
CONFIG=configs/llama_tiny.yaml pair llama_fp32 1e-4
CONFIG=configs/llama_tiny.yaml pair llama_bf16 2e-2 --set train.precision=bf16
# Dropout (residual and attention probabilities): the masks come from the CPU's generators on
# both sides, so the GPU drops what the CPU drops; with selective recomputation, the attention's
# masks drawn again in backward are the same ones.
pair dropout_fp32 1e-4 --set model.dropout=0.1
pair dropout_fp32_recompute_selective 1e-4 --set model.dropout=0.1 --set train.recompute=selective
# Mixtures of experts: GPT's (4 experts, top 2, balance and z losses) and DeepSeek-V3's in small
# (sigmoid router with groups and moving expert biases, a shared expert, latent attention, YaRN,
# one multi-token prediction module). In bf16 the experts' products are ATen's grouped GEMM on
# the GPU and the CPU. fp32 compares with --routing-flips: a token whose scores for two experts
# are within the two devices' rounding may pick the other one, and from that step on (it must
# look like one such near-tie) the runs are different trajectories.
MOE=(--set model.moe.num_experts=4 --set model.moe.top_k=2 --set model.moe.aux_loss_coeff=0.01
     --set model.moe.z_loss_coeff=0.001)
DSV3=(--set model.moe.num_experts=8 --set model.moe.score=sigmoid --set model.moe.n_group=4 --set model.moe.topk_group=2
      --set model.moe.routed_scaling_factor=2.5 --set model.moe.bias_update_rate=0.01 --set model.moe.moe_intermediate_size=24
      --set model.moe.n_shared_experts=1 --set model.moe.first_k_dense_replace=1 --set model.num_kv_heads=0
      --set model.mla.kv_lora_rank=16 --set model.mla.q_lora_rank=24 --set model.mla.qk_nope_head_dim=8
      --set model.mla.qk_rope_head_dim=4 --set model.mla.v_head_dim=6 --set model.rope_interleave=true
      --set model.rope_scaling.type=yarn --set model.rope_scaling.factor=4
      --set model.rope_scaling.original_max_position_embeddings=8 --set model.rope_scaling.mscale_all_dim=1
      --set model.mtp.depth=1 --set model.mtp.loss_weight=0.3)
moe_runs() {  # moe_runs NAME RTOL [args...]: as pair_runs, the fp32 ones with --routing-flips
  local name=$1 rtol=$2 flips=()
  shift 2
  [ "$rtol" = 1e-4 ] && flips=(--routing-flips)
  run "${name}_cpu" --set train.device=cpu "$@" && run "${name}_gpu" --set train.device="$gpu" "$@" ${LOOM_GPU_CHECK_EXTRA:-} &&
    python3 tests/scripts/checks.py compare-metrics "$work/${name}_gpu/metrics.jsonl" "$work/${name}_cpu/metrics.jsonl" \
      --rtol "$rtol" "${flips[@]}"
}
check moe_fp32 moe_runs moe_fp32 1e-4 "${MOE[@]}"
check moe_bf16 moe_runs moe_bf16 2e-2 "${MOE[@]}" --set train.precision=bf16
CONFIG=configs/llama_tiny.yaml check dsv3_fp32 moe_runs dsv3_fp32 1e-4 "${DSV3[@]}"
CONFIG=configs/llama_tiny.yaml check dsv3_bf16 moe_runs dsv3_bf16 2e-2 "${DSV3[@]}" --set train.precision=bf16

# loom's CUDA kernels against LibTorch's composed kernels (tests/test_cuda_kernels.cpp). In the
# dry run (GPU side on the CPU) the binary runs without LOOM_REQUIRE_GPU and checks the CPU's path.
kernel_tests() {
  local tests=${UNIT_TESTS:-$(dirname "$loom")/tests/loom_unit_tests} require=1
  [ "$gpu" = cpu ] && require=0
  [ -x "$tests" ] || { echo "no unit-test binary at $tests"; return 1; }
  if ! LOOM_REQUIRE_GPU=$require OMP_NUM_THREADS=1 "$tests" "[cuda]" > "$work/cuda_kernels.log" 2>&1; then
    tail -40 "$work/cuda_kernels.log"
    return 1
  fi
  tail -1 "$work/cuda_kernels.log"
}
check cuda_kernels kernel_tests

# Checkpoint on the GPU: half the steps, exit, resume: the rest equal the straight run's bit for bit.
resume_checks() {
  run straight --set train.device="$gpu" --set checkpoint.dir="$work/ck_straight" &&
    run first --set train.device="$gpu" --set checkpoint.dir="$work/ck" --set train.exit_after=$half &&
    run second --set train.device="$gpu" --set checkpoint.dir="$work/ck" --resume auto &&
    grep -q "resumed from" "$work/second.log" &&
    python3 - "$work/second/metrics.jsonl" "$work/straight/metrics.jsonl" $half << 'PY'
import json, sys
a = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[1]))}
b = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[2]))}
steps = [s for s in a if s > int(sys.argv[3])]
assert steps and all(a[s] == b[s] for s in steps), [(s, a[s], b[s]) for s in steps if a[s] != b[s]][:3]
print(f"steps {min(steps)}-{max(steps)} bit-identical after resuming on the GPU")
PY
}
check resume_gpu resume_checks
resume_on_cpu() {
  run cpu_resume --set train.device=cpu --resume "$work/ck/$(printf 'step_%08d' $half)" &&
    python3 - "$work/cpu_resume/metrics.jsonl" "$work/straight/metrics.jsonl" << 'PY'
import json, sys
a = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[1]))}
b = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[2]))}
worst = max(abs(a[s] - b[s]) / max(1, abs(b[s])) for s in a)
assert a and worst <= 1e-4, worst
print(f"GPU checkpoint resumed on the CPU: {len(a)} steps within {worst:.2g} of the GPU run")
PY
}
check resume_gpu_checkpoint_on_cpu resume_on_cpu

for name in fp32 bf16; do
  echo "--- $name on the GPU:"
  grep -E "step $steps/$steps|done:|model FLOPs" "$work/${name}_gpu.log" | sed 's/^/    /'
done
echo "gpu_check: $passed passed, $failed failed"
[ "$failed" = 0 ]
