#!/usr/bin/env bash
# Data-parallel equivalence: dp = 2 and 4, with and without gradient
# accumulation, give the per-step losses of one process with the same global
# batch, |a - b| <= 1e-5 * max(1, |b|) for 20 steps in fp32.
# Usage: dp_equivalence.sh mpirun|torchrun
source "$(dirname "$0")/common.sh"
launcher="$1"

launch() {  # launch NP RUN_DIR [--set ...]
  local np="$1" dir="$2"
  shift 2
  if [ "$np" = 1 ]; then
    "$LOOM" train "$TINY" --run-dir "$dir" "$@" > "$dir.log" 2>&1
  elif [ "$launcher" = mpirun ]; then
    mpirun --oversubscribe -np "$np" "$LOOM" train "$TINY" --run-dir "$dir" "$@" > "$dir.log" 2>&1
  else
    torchrun --nproc_per_node "$np" \
      --master_port "$(free_port)" --no_python "$LOOM" train "$TINY" --run-dir "$dir" "$@" > "$dir.log" 2>&1
  fi || { cat "$dir.log"; fail "run $dir failed"; }
}

# The reference: one process, the whole global batch of 8 in one micro-batch.
launch 1 "$WORK/ref" --set train.micro_batch_size=8
# Layouts: NP and micro-batch size (accumulation = 8 / (micro * NP)).
for layout in "1 2" "2 4" "2 1" "4 2" "4 1"; do
  set -- $layout
  name="np$1_micro$2"
  launch "$1" "$WORK/$name" --set "train.micro_batch_size=$2"
  echo -n "$launcher $name vs one process: "
  compare_losses "$WORK/$name" "$WORK/ref" || fail "$name differs from the one-process run"
done

# The comparison can fail: a different seed must not pass.
launch 1 "$WORK/other_seed" --set train.micro_batch_size=8 --set train.seed=100
if compare_losses "$WORK/other_seed" "$WORK/ref" > /dev/null; then fail "a different seed passed the comparison"; fi
grep -q '"tokens_per_s"' "$WORK/ref/metrics.jsonl" || fail "metrics.jsonl lacks tokens_per_s"
echo "dp equivalence under $launcher: ok"
