#!/usr/bin/env bash
# Activation recomputation changes nothing but memory: at tp=2 pp=2 with
# dropout on, `full` and `selective` give the losses of `none` bit for bit
# (the RNG streams are rewound for the re-run), also with sequence
# parallelism; a full recompute's extra tp collectives are exactly the
# cost model's (`loom plan --run`); and the activation peak of the memory
# report falls on every rank.
source "$(dirname "$0")/common.sh"
SETS=(--set parallel.tp=2 --set parallel.pp=2 --set model.dropout=0.1 --set model.num_layers=4 --set train.global_batch_size=16)
for sp in false true; do
  for recompute in none full selective; do
    name="sp${sp}_$recompute"
    mpirun --oversubscribe -np 4 "$LOOM" train "$TINY" --run-dir "$WORK/$name" "${SETS[@]}" \
      --set parallel.sequence_parallel="$sp" --set train.recompute="$recompute" > "$WORK/$name.log" 2>&1 ||
      { cat "$WORK/$name.log"; fail "$name run"; }
    "$LOOM" plan --run "$WORK/$name" | grep -q "every rank's predicted traffic equals the counters" || fail "$name traffic"
  done
  # The memory report's activation peak (first step, every rank) falls: full keeps only each
  # block's input, selective drops the attention scores and probabilities.
  python3 - "$WORK/sp${sp}_none" "$WORK/sp${sp}_full" "$WORK/sp${sp}_selective" "$sp" << 'PY' || fail "activation memory did not fall"
import json, sys
peaks = [[r["activation_peak_bytes"] for r in json.loads(open(d + "/metrics.jsonl").readline())["memory"]] for d in sys.argv[1:4]]
none, full, selective = peaks
assert all(p > 0 for p in none), none
assert all(f < n for f, n in zip(full, none)) and all(s < n for s, n in zip(selective, none)), peaks
print(f"sequence_parallel={sys.argv[4]}: activation peak per rank (KB) none {[n // 1024 for n in none]}, "
      f"full {[f // 1024 for f in full]}, selective {[s // 1024 for s in selective]}")
PY
  for recompute in full selective; do
    echo -n "sequence_parallel=$sp, recompute $recompute vs none: "
    python3 "$LOOM_SOURCE/tests/scripts/compare_metrics.py" "$WORK/sp${sp}_$recompute/metrics.jsonl" \
      "$WORK/sp${sp}_none/metrics.jsonl" --rtol 0 || fail "recompute $recompute changed the losses"
  done
done
echo "recompute: ok"
