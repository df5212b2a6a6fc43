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
  python3 "$SCRIPTS/checks.py" activation-peaks-fall "$WORK"/sp${sp}_{none,full,selective} --label "sequence_parallel=$sp" ||
    fail "activation memory did not fall"
  for recompute in full selective; do
    echo -n "sequence_parallel=$sp, recompute $recompute vs none: "
    python3 "$SCRIPTS/checks.py" compare-metrics "$WORK/sp${sp}_$recompute/metrics.jsonl" \
      "$WORK/sp${sp}_none/metrics.jsonl" --rtol 0 || fail "recompute $recompute changed the losses"
  done
done
echo "recompute: ok"
