#!/usr/bin/env bash
# Mixed precision (train.precision bf16 and fp16) trains on CPU:
# - bf16 in one process, at tp=2 pp=2 with sequence parallelism, at dp=4 with
#   ZeRO-1 reducing gradients in bf16, and at dp=4 with ZeRO-2 and ZeRO-3: the
#   loss falls, and the layouts end near the one-process run (bf16 rounds
#   differently per layout, so this is a sanity bound, not the fp32
#   equivalence the other tests hold); ZeRO-3 at tp=2 pp=2 dp=2 gives the
#   ZeRO-0 losses of the same layout within 1e-5; the traffic counters equal
#   `loom plan --run`'s prediction (bf16 activations, bf16 gradient reduction,
#   bf16 parameter gathers);
# - the memory report: bf16 parameters 2N, fp32 gradients 4N and fp32 master
#   weights 4N beside the Adam moments 8N (8N/d with ZeRO-1); ZeRO-2 2N + 16N/d;
#   ZeRO-3 16N/d (fp32 master shards, no persistent bf16 copy);
# - fp16 with an overflow injected at step 3: that step is skipped (the
#   checkpoints of steps 2 and 3 hold the same weights and moments), the
#   loss scale halves, no other step is skipped, the schedule does not advance
#   for it (step 4 trains at step 3's rate), the loss falls, and a run
#   resumed after step 5 continues with the same scale and losses; the same
#   with ZeRO-3 (tp=2 dp=2);
# - bad input exits 2.
source "$(dirname "$0")/common.sh"

run_loom 1 fp32 || { cat "$WORK/fp32.log"; fail "fp32 run"; }
run_loom 1 bf16 --set train.precision=bf16 || { cat "$WORK/bf16.log"; fail "bf16 run"; }
run_loom 4 bf16_tp2pp2sp --set train.precision=bf16 --set parallel.tp=2 --set parallel.pp=2 \
  --set parallel.sequence_parallel=true || { cat "$WORK/bf16_tp2pp2sp.log"; fail "bf16 tp2 pp2 run"; }
run_loom 4 bf16_dp4z1 --set train.precision=bf16 --set parallel.zero_stage=1 --set parallel.grad_reduce_dtype=bf16 ||
  { cat "$WORK/bf16_dp4z1.log"; fail "bf16 dp4 zero1 run"; }
for zero in 2 3; do
  run_loom 4 bf16_dp4z$zero --set train.precision=bf16 --set parallel.zero_stage=$zero ||
    { cat "$WORK/bf16_dp4z$zero.log"; fail "bf16 dp4 zero$zero run"; }
done
for zero in 0 3; do
  run_loom 8 bf16_tp2pp2z$zero --set train.precision=bf16 --set parallel.tp=2 --set parallel.pp=2 --set parallel.zero_stage=$zero ||
    { cat "$WORK/bf16_tp2pp2z$zero.log"; fail "bf16 tp2 pp2 dp2 zero$zero run"; }
done
echo -n "bf16, tp=2 pp=2 dp=2, zero_stage 3 vs 0: "
python3 "$SCRIPTS/checks.py" compare-metrics "$WORK/bf16_tp2pp2z3/metrics.jsonl" \
  "$WORK/bf16_tp2pp2z0/metrics.jsonl" --rtol 1e-5 || fail "bf16 zero_stage 3 differs from 0"
for run in bf16_tp2pp2sp bf16_dp4z1 bf16_dp4z2 bf16_dp4z3 bf16_tp2pp2z3; do
  "$LOOM" plan --run "$WORK/$run" | grep -q "every rank's predicted traffic equals the counters" || fail "$run traffic"
done
# The memory report: (params, grads, master, Adam) per rank by stage, N from the fp32 run.
python3 "$SCRIPTS/checks.py" bf16-memory "$WORK/bf16" --stage 0 --dp 1 --fp32 "$WORK/fp32" || fail "bf16 runs"
for zero in 1 2 3; do
  python3 "$SCRIPTS/checks.py" bf16-memory "$WORK/bf16_dp4z$zero" --stage $zero --dp 4 --fp32 "$WORK/fp32" || fail "bf16 runs"
done
python3 "$SCRIPTS/checks.py" learns "$WORK"/{bf16,bf16_tp2pp2sp,bf16_dp4z1,bf16_dp4z2,bf16_dp4z3} --by 0.5 \
  --ends-near "$WORK/fp32" --within 0.05 || fail "bf16 runs"

# fp16: an overflow at step 3 on rank 1 (tp=2), a checkpoint after every step.
FP16=(--set train.precision=fp16 --set parallel.tp=2 --set checkpoint.interval=1 --set checkpoint.keep=30)
run_loom 2 fp16 "${FP16[@]}" --set checkpoint.dir="$WORK/fp16_ckpt" --inject-fault 1:3:overflow ||
  { cat "$WORK/fp16.log"; fail "fp16 run"; }
grep -q "gradients overflowed at step 3; the step is skipped and the loss scale goes 65536 -> 32768" "$WORK/fp16.log" ||
  { cat "$WORK/fp16.log"; fail "no overflow message"; }
python3 "$SCRIPTS/checks.py" fp16-skipped-step "$WORK/fp16" "$WORK/fp16_ckpt" --step 3 --scale 65536 --last 20 ||
  fail "fp16 loss scaling"
# Resumed after step 5 (scale 32768, 2 clean steps): steps 6-20 as the uninterrupted run.
run_loom 2 fp16_resumed "${FP16[@]}" --set checkpoint.dir="$WORK/fp16_ckpt" --resume "$WORK/fp16_ckpt/step_00000005" ||
  { cat "$WORK/fp16_resumed.log"; fail "fp16 resume"; }
compare_resumed "$WORK/fp16_resumed" "$WORK/fp16" 6 20 "fp16 resumed after step 5"
# The same with ZeRO-3 (tp=2 dp=2): skipped step, halved scale, resume.
FP16_Z3=(--set train.precision=fp16 --set parallel.tp=2 --set parallel.zero_stage=3 --set checkpoint.interval=5
  --set checkpoint.keep=10 --set checkpoint.dir="$WORK/fp16_z3_ckpt")
run_loom 4 fp16_z3 "${FP16_Z3[@]}" --inject-fault 1:3:overflow ||
  { cat "$WORK/fp16_z3.log"; fail "fp16 zero3 run"; }
grep -q "gradients overflowed at step 3; the step is skipped and the loss scale goes 65536 -> 32768" "$WORK/fp16_z3.log" ||
  fail "fp16 zero3: no overflow message"
run_loom 4 fp16_z3_resumed "${FP16_Z3[@]}" --resume "$WORK/fp16_z3_ckpt/step_00000005" ||
  { cat "$WORK/fp16_z3_resumed.log"; fail "fp16 zero3 resume"; }
compare_resumed "$WORK/fp16_z3_resumed" "$WORK/fp16_z3" 6 20 "fp16 ZeRO-3 resumed after step 5"
python3 "$SCRIPTS/checks.py" steps-agree "$WORK/fp16_resumed" "$WORK/fp16" --key loss_scale --rtol 0 ||
  fail "resumed loss scale"
# fp16 weights with fp32 arithmetic: the embeddings' tp sums are in fp16 (the model's, and a
# multi-token prediction module's of the shifted tokens, here with sequence parallelism), the rest in fp32.
run_loom 2 fp16_mtp --set train.precision=fp16 --set parallel.tp=2 --set parallel.sequence_parallel=true \
  --set model.arch=llama --set model.mtp.depth=1 --set train.steps=3 --set train.warmup_steps=1 ||
  { cat "$WORK/fp16_mtp.log"; fail "fp16 with MTP"; }
for run in fp16 fp16_z3 fp16_mtp; do
  "$LOOM" plan --run "$WORK/$run" > "$WORK/plan_$run.log" || { cat "$WORK/plan_$run.log"; fail "plan --run $run"; }
  grep -q "every rank's predicted traffic equals the counters" "$WORK/plan_$run.log" || { cat "$WORK/plan_$run.log"; fail "$run traffic"; }
done

expect_bad() {  # expect_bad PATTERN ARGS...: loom train exits 2 and names PATTERN
  local pattern="$1" code=0
  shift
  "$LOOM" train "$TINY" --run-dir "$WORK/bad" "$@" > "$WORK/bad.log" 2>&1 || code=$?
  [ "$code" = 2 ] && grep -q -- "$pattern" "$WORK/bad.log" || { cat "$WORK/bad.log"; fail "'$*' exited $code"; }
}
expect_bad "needs train.precision fp16" --inject-fault 0:2:overflow
expect_bad "parallel.grad_reduce_dtype" --set parallel.grad_reduce_dtype=fp16
expect_bad "applies to zero_stage 0 and 1" --set parallel.grad_reduce_dtype=bf16 --set parallel.zero_stage=2
expect_bad "train.loss_scale_window" --set train.loss_scale_window=0
expect_bad "fp16 with model.moe" --set train.precision=fp16 --set model.moe.num_experts=4
echo "mixed_precision: ok"
