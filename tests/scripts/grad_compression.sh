#!/usr/bin/env bash
# parallel.grad_compression on dp 4 (tests/configs/tiny.yaml, one bucket):
#  1. The bytes each puts on the dp wire per step, against the uncompressed run's: bf16 half of
#     fp32's and int8 a quarter plus one fp32 scale per 256 values, each over an all-to-all and an
#     all-gather; PowerSGD (rank 2) (n + m) r 4 bytes per matrix plus the vectors uncompressed.
#  2. bf16 and int8 stay within 1% of the uncompressed losses over the 20 steps, and PowerSGD at
#     full rank (32: every matrix's whole rank) gives them within 1e-5 (P Q^T is then the sum
#     itself); the 2% after 300 steps of real text at rank 4 is bench/compression.sh's.
#  3. A run saved at step 10 and resumed gives the uninterrupted run's losses bit for bit (int8 and
#     PowerSGD: their error buffers, Q and reduction count come back); resumed at another dp, the
#     state starts afresh, said so, and so it does with other buckets or another PowerSGD rank.
#     A fresh state counts the steps resumed, so that PowerSGD keeps to its start_step.
#  4. At tp 2 (int8) and pp 2 (PowerSGD, tied embedding) the copies of a parameter stay equal: resumed
#     bit for bit.
#  5. ZeRO 2 and 3 are refused naming the key (exit 2).
source "$(dirname "$0")/common.sh"
DP4=(--set parallel.bucket_mb=0 --set train.micro_batch_size=2)
PSGD=(--set parallel.grad_compression=powersgd --set parallel.powersgd.rank=2 --set parallel.powersgd.start_step=3)

must_run() { run_loom "$@" || { cat "$WORK/$2.log"; fail "run $2 failed"; }; }
must_run 4 none "${DP4[@]}"
must_run 4 bf16 "${DP4[@]}" --set parallel.grad_compression=bf16
must_run 4 int8 "${DP4[@]}" --set parallel.grad_compression=int8
must_run 4 powersgd "${DP4[@]}" "${PSGD[@]}"
python3 "$SCRIPTS/checks.py" compressed-bytes "$WORK" --ranks 4 --powersgd-rank 2 --powersgd-start 3 ||
  fail "compressed bytes differ from the formulas"
# The step's cost model predicts bf16's exchange call by call (an all-to-all and an all-gather a
# bucket); int8's and PowerSGD's it leaves to loom plan --cluster, and `loom plan --run` says so.
"$LOOM" plan --run "$WORK/bf16" > "$WORK/bf16.plan" || { cat "$WORK/bf16.plan"; fail "loom plan --run bf16"; }
python3 "$SCRIPTS/checks.py" plan-vs-run "$WORK/bf16" || fail "bf16's traffic differs from the prediction"
for kind in int8 powersgd; do
  expect_exit 2 "parallel.grad_compression $kind" "$LOOM" plan --run "$WORK/$kind"
done
for kind in bf16 int8; do
  echo -n "$kind vs none: "
  python3 "$SCRIPTS/checks.py" compare-metrics "$WORK/$kind/metrics.jsonl" "$WORK/none/metrics.jsonl" --rtol 0.01 ||
    fail "$kind strays from the uncompressed losses"
done
must_run 4 powersgd_full "${DP4[@]}" "${PSGD[@]}" --set parallel.powersgd.rank=32
echo -n "PowerSGD at full rank vs none: "
python3 "$SCRIPTS/checks.py" compare-metrics "$WORK/powersgd_full/metrics.jsonl" "$WORK/none/metrics.jsonl" --rtol 1e-5 ||
  fail "PowerSGD at full rank differs from the uncompressed sum"
# The comparison can fail: compressed losses are not the uncompressed ones bit for bit.
if python3 "$SCRIPTS/checks.py" compare-metrics "$WORK/int8/metrics.jsonl" "$WORK/none/metrics.jsonl" --rtol 0 > /dev/null; then
  fail "int8's losses equal the uncompressed ones exactly: was anything compressed?"
fi

for kind in int8 powersgd; do
  if [ "$kind" = int8 ]; then SETS=(--set parallel.grad_compression=int8); else SETS=("${PSGD[@]}"); fi
  must_run 4 "${kind}_straight" "${DP4[@]}" "${SETS[@]}" --set checkpoint.dir="$WORK/ck_$kind" --set checkpoint.interval=10 \
    --set checkpoint.keep=5
  must_run 4 "${kind}_resumed" "${DP4[@]}" "${SETS[@]}" --set checkpoint.dir="$WORK/ck_$kind" \
    --resume "$WORK/ck_$kind/step_00000010"
  grep -q "gradient compression state not restored" "$WORK/${kind}_resumed.log" && fail "$kind: state not restored"
  python3 "$SCRIPTS/checks.py" steps-agree "$WORK/${kind}_resumed" "$WORK/${kind}_straight" --rtol 0 --first 11 \
    --last 20 --label "$kind resumed at step 10, bit for bit" || fail "$kind resumed differs"
done
# At dp 2 the error buffers belong to other ranks: started afresh, and said so.
must_run 2 int8_dp2 "${DP4[@]}" --set parallel.grad_compression=int8 --set checkpoint.dir="$WORK/ck_int8" \
  --resume "$WORK/ck_int8/step_00000010" --set checkpoint.interval=0
grep -q "gradient compression state not restored" "$WORK/int8_dp2.log" || fail "dp 2 resume did not say the state starts afresh"
# Other buckets (bucket_mb) or another PowerSGD rank: the state does not fit, and the run says so.
must_run 4 int8_buckets "${DP4[@]}" --set parallel.grad_compression=int8 --set parallel.bucket_mb=0.01 \
  --set checkpoint.dir="$WORK/ck_int8" --resume "$WORK/ck_int8/step_00000010" --set checkpoint.interval=0
grep -q "buckets, PowerSGD ranks or expert split differ" "$WORK/int8_buckets.log" || fail "other buckets did not say the state starts afresh"
must_run 4 powersgd_rank3 "${DP4[@]}" "${PSGD[@]}" --set parallel.powersgd.rank=3 --set checkpoint.dir="$WORK/ck_powersgd" \
  --resume "$WORK/ck_powersgd/step_00000010" --set checkpoint.interval=0
grep -q "buckets, PowerSGD ranks or expert split differ" "$WORK/powersgd_rank3.log" || fail "another rank did not say the state starts afresh"
# ... and PowerSGD goes on from the resumed step 11 (its start_step, 3, is behind it): the resumed
# run's 10 steps send less than two uncompressed steps' gradients (1.6 measured; a fresh count of
# reductions sent steps 11-13 whole, 4.1).
grep -q "PowerSGD still from step 11" "$WORK/powersgd_rank3.log" || fail "the resumed PowerSGD did not say it goes on from step 11"
python3 - "$WORK" << 'PY' || fail "the resumed PowerSGD started over its plain steps"
import json, sys
def dp(name):
    t = json.load(open(f"{sys.argv[1]}/{name}/traffic.json"))
    return t["steps"], t["ranks"][0]["groups"]["dp"]["all_reduce"]["bytes"]
steps, none = dp("none")
resumed_steps, resumed = dp("powersgd_rank3")
assert resumed_steps == 10 and resumed < 2 * none / steps, (resumed_steps, resumed, none / steps)
print(f"PowerSGD resumed with a fresh state: {resumed} dp bytes in 10 steps, {resumed * steps / none:.2f} plain steps' worth")
PY

# Copies of a parameter outside the dp group stay equal, so a checkpoint (which keeps one) resumes
# bit for bit: at tp 2 the replicated LayerNorms and biases, which int8 quantises in blocks of their
# own (a block shared with a tp-split neighbour scaled each copy differently: 4e-6 off within 6
# steps), and at pp 2 the tied embedding of the first and last stages, whose PowerSGD Q both draw
# from the parameter's key (each bucket's own draw parted them: 1e-2).
for layout in tp2_int8 pp2_powersgd; do
  case $layout in
    tp2_int8) SETS=(--set parallel.tp=2 --set parallel.grad_compression=int8) ;;
    pp2_powersgd) SETS=(--set parallel.pp=2 "${PSGD[@]}") ;;
  esac
  must_run 4 "${layout}_straight" "${SETS[@]}" --set checkpoint.dir="$WORK/ck_$layout" --set checkpoint.interval=10
  must_run 4 "${layout}_resumed" "${SETS[@]}" --set checkpoint.dir="$WORK/ck_$layout" --resume "$WORK/ck_$layout/step_00000010"
  python3 "$SCRIPTS/checks.py" steps-agree "$WORK/${layout}_resumed" "$WORK/${layout}_straight" --rtol 0 --first 11 \
    --last 20 --label "$layout resumed at step 10, bit for bit" || fail "$layout resumed differs: the copies drifted apart"
done

for zero in 2 3; do
  expect_exit 2 "parallel.grad_compression" "$LOOM" train "$TINY" --run-dir "$WORK/z$zero" \
    --set parallel.grad_compression=int8 --set "parallel.zero_stage=$zero"
done
echo "gradient compression: ok"
