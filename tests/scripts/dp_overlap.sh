#!/usr/bin/env bash
# Gradient buckets overlap backward: at dp=2 with small buckets (10 KB), the
# trace of the last step shows the first bucket's all-reduce launched before
# backward ends, the losses still equal one process's within 1e-5, and the dp
# all-reduces per step are exactly the cost model's buckets (`loom plan --run`).
source "$(dirname "$0")/common.sh"
"$LOOM" train "$TINY" --run-dir "$WORK/ref" > "$WORK/ref.log" 2>&1 || { cat "$WORK/ref.log"; fail "reference run"; }
for layout in "2 dp2" "4 pp2_dp2 --set parallel.pp=2"; do
  set -- $layout
  np="$1" name="$2"
  shift 2
  mpirun --oversubscribe -np "$np" "$LOOM" train "$TINY" --run-dir "$WORK/$name" --set parallel.bucket_mb=0.01 \
    --set log.trace=true "$@" > "$WORK/$name.log" 2>&1 || { cat "$WORK/$name.log"; fail "$name run"; }
  echo -n "$name with 10 KB buckets vs one process: "
  compare_losses "$WORK/$name" "$WORK/ref" || fail "$name: buckets changed the losses"
  "$LOOM" plan --run "$WORK/$name" > "$WORK/$name.plan" || fail "loom plan --run $name"
  grep -q "every rank's predicted traffic equals the counters" "$WORK/$name.plan" || { cat "$WORK/$name.plan"; fail "$name traffic"; }
  python3 "$SCRIPTS/checks.py" trace-overlap "$WORK/$name" || fail "$name: no overlap in the trace"
done
echo "dp overlap: ok"
