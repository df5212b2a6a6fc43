#!/usr/bin/env bash
# Pipeline parallelism end to end: GPT losses for pp in {2, 4} with the gpipe,
# 1f1b and interleaved (v=2) schedules, alone and with tp=2 and dp=2 (up to 8
# ranks), equal the one-process losses within 1e-5 relative for 20 steps.
# The model has 8 layers so that pp=4 x v=2 splits it, and a global batch of 16
# so that dp=2 still gives each pipeline 4 micro-batches.
#
# pipeline_equivalence.sh GROUP runs one group of layouts (alone | tp | dp),
# so that ctest can report them separately.
source "$(dirname "$0")/common.sh"
group="${1:?usage: pipeline_equivalence.sh alone|tp|dp}"
MODEL=(--set model.num_layers=8 --set train.global_batch_size=16)

"$LOOM" train "$TINY" --run-dir "$WORK/ref" "${MODEL[@]}" > "$WORK/ref.log" 2>&1 || { cat "$WORK/ref.log"; fail "reference run"; }

run_layout() {  # run_layout TP PP SCHEDULE
  local tp="$1" pp="$2" schedule="$3" np dp v=1
  [ "$schedule" = interleaved ] && v=2
  case "$group" in alone) dp=1 ;; tp) dp=1 ;; dp) dp=2 ;; esac
  np=$((tp * pp * dp))
  local name="pp${pp}_tp${tp}_dp${dp}_$schedule"
  mpirun --oversubscribe -np "$np" "$LOOM" train "$TINY" --run-dir "$WORK/$name" "${MODEL[@]}" \
    --set parallel.tp="$tp" --set parallel.pp="$pp" --set parallel.schedule="$schedule" \
    --set parallel.virtual_stages="$v" > "$WORK/$name.log" 2>&1 || { cat "$WORK/$name.log"; fail "run $name failed"; }
  echo -n "$name vs one process: "
  compare_losses "$WORK/$name" "$WORK/ref" || fail "$name differs from the one-process run"
  # The per-step pipeline record: one busy time per stage and the formula's bubble.
  python3 "$SCRIPTS/checks.py" pipeline-record "$WORK/$name" --pp "$pp" --v "$v" --m "$((16 / 2 / dp))" ||
    fail "$name: pipeline record"
}

tp=1
[ "$group" = tp ] && tp=2
for pp in 2 4; do
  for schedule in gpipe 1f1b interleaved; do
    run_layout "$tp" "$pp" "$schedule"
  done
done
if [ "$group" = dp ]; then
  # All three dimensions at once, with sequence parallelism on the tp pairs.
  for schedule in 1f1b interleaved; do
    name="pp2_tp2_dp2_sp_$schedule"
    v=1
    [ "$schedule" = interleaved ] && v=2
    mpirun --oversubscribe -np 8 "$LOOM" train "$TINY" --run-dir "$WORK/$name" "${MODEL[@]}" --set parallel.tp=2 \
      --set parallel.pp=2 --set parallel.sequence_parallel=true --set parallel.schedule="$schedule" \
      --set parallel.virtual_stages="$v" > "$WORK/$name.log" 2>&1 || { cat "$WORK/$name.log"; fail "run $name failed"; }
    echo -n "$name vs one process: "
    compare_losses "$WORK/$name" "$WORK/ref" || fail "$name differs from the one-process run"
  done
fi
echo "pipeline equivalence ($group): ok"
