#!/usr/bin/env bash
# A Llama-shaped model (tests/configs/llama_tiny.yaml: grouped-query attention with
# 4 query and 2 kv heads, SwiGLU, RMSNorm, RoPE, no biases, untied output layer)
# trains to the same losses at every layout as in one process, within 1e-5
# relative for 20 steps: tp 2 (each rank one kv head), tp 4 (each kv head shared
# by 2 ranks), both with sequence parallelism, pp 2 and 4 with 1f1b and the
# interleaved schedule, dp 2 with ZeRO 1 and 3, full and selective recomputation,
# tp 2 x pp 2 x dp 2; a checkpoint saved at tp 4 resumes at tp 2 x pp 2 and in one
# process; and bf16 tracks fp32. The config's 8 layers are for pp 4 with 2 virtual stages; the
# layouts without pp 4 or virtual stages run 2 of them (layers repeat, so 8 checked nothing more
# there and took about four times as long).
source "$(dirname "$0")/common.sh"
LLAMA="$LOOM_SOURCE/tests/configs/llama_tiny.yaml"

run() {  # run NP NAME [--set ...]
  local np="$1" name="$2"
  shift 2
  [[ "$name" == pp4* || "$name" == *interleaved* || "$name" == ref8 || "$name" == *_60 || "$name" == bf16 ]] ||
    set -- --set model.num_layers=2 "$@"
  if [ "$np" = 1 ]; then
    "$LOOM" train "$LLAMA" --run-dir "$WORK/$name" "$@" > "$WORK/$name.log" 2>&1 < /dev/null
  else
    mpirun --oversubscribe -np "$np" "$LOOM" train "$LLAMA" --run-dir "$WORK/$name" "$@" > "$WORK/$name.log" 2>&1 < /dev/null
  fi || { cat "$WORK/$name.log"; fail "run $name"; }
}

run 1 ref   # 2 layers
run 1 ref8  # all 8
while read -r np name sets; do
  args=()
  for s in $sets; do args+=(--set "$s"); done
  run "$np" "$name" "${args[@]}"
  ref=ref
  [[ "$name" == pp4* || "$name" == *interleaved* ]] && ref=ref8
  echo -n "$name vs one process: "
  compare_losses "$WORK/$name" "$WORK/$ref" || fail "$name differs from the one-process run"
done <<'LAYOUTS'
2 tp2 parallel.tp=2
4 tp4_shared_kv parallel.tp=4
2 tp2_sp parallel.tp=2 parallel.sequence_parallel=true
4 tp4_shared_kv_sp parallel.tp=4 parallel.sequence_parallel=true
2 pp2_1f1b parallel.pp=2
4 pp4_1f1b parallel.pp=4
2 pp2_interleaved parallel.pp=2 parallel.schedule=interleaved parallel.virtual_stages=2
4 pp4_interleaved parallel.pp=4 parallel.schedule=interleaved parallel.virtual_stages=2
2 dp2_zero1 parallel.zero_stage=1
2 dp2_zero3 parallel.zero_stage=3
1 recompute_full train.recompute=full
2 tp2_recompute_selective parallel.tp=2 train.recompute=selective
8 tp2_pp2_dp2 parallel.tp=2 parallel.pp=2 parallel.sequence_parallel=true
LAYOUTS

# Layout-independent checkpoints: saved at tp 4 (kv heads shared, the kv weight whole on
# every rank) after step 10, resumed at tp 2 x pp 2 (kv heads split) and in one process.
run 4 saved_tp4 --set parallel.tp=4 --set checkpoint.dir="$WORK/ck" --set train.exit_after=10
for layout in "4 resumed_tp2_pp2 parallel.tp=2 parallel.pp=2" "1 resumed_one"; do
  set -- $layout
  np="$1" name="$2"
  shift 2
  args=()
  for s in "$@"; do args+=(--set "$s"); done
  run "$np" "$name" "${args[@]}" --resume "$WORK/ck/step_00000010"
  compare_resumed "$WORK/$name" "$WORK/ref" 11 20 "saved at tp 4, $name" ||
    fail "$name differs from the uninterrupted run"
done

# Mixed precision: bf16 learns and ends near fp32 (bf16 rounds every activation).
run 1 bf16 --set train.precision=bf16 --set train.steps=60
run 1 fp32_60 --set train.steps=60
python3 "$SCRIPTS/checks.py" learns "$WORK/bf16" --by 0.5 --ends-near "$WORK/fp32_60" --within 0.05 ||
  fail "bf16 does not track fp32"
echo "llama equivalence: ok"
