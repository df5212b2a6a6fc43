#!/usr/bin/env bash
# Tensor and sequence parallelism end to end: GPT losses for tp in {2, 4}, with
# and without sequence parallelism, alone and with dp=2, equal the one-process
# losses within 1e-5 relative for 20 steps (dropout 0); with dropout on, two
# runs with the same seed give identical losses; and the communication
# counters show exactly the expected tensor-parallel traffic.
source "$(dirname "$0")/common.sh"

launch() {  # launch NP RUN_DIR [--set ...]
  local np="$1" dir="$2"
  shift 2
  mpirun --oversubscribe -np "$np" "$LOOM" train "$TINY" --run-dir "$dir" "$@" > "$dir.log" 2>&1 ||
    { cat "$dir.log"; fail "run $dir failed"; }
}

"$LOOM" train "$TINY" --run-dir "$WORK/ref" > "$WORK/ref.log" 2>&1 || { cat "$WORK/ref.log"; fail "reference run"; }
for layout in "2 2 false" "2 2 true" "4 4 false" "4 4 true" "4 2 false" "4 2 true" "8 4 false" "8 4 true"; do
  set -- $layout
  name="np$1_tp$2_sp$3"
  launch "$1" "$WORK/$name" --set "parallel.tp=$2" --set "parallel.sequence_parallel=$3"
  echo -n "$name (dp=$(($1 / $2))) vs one process: "
  compare_losses "$WORK/$name" "$WORK/ref" || fail "$name differs from the one-process run"
done

# A vocabulary that tp does not divide is padded; the padding never changes the loss.
"$LOOM" train "$TINY" --run-dir "$WORK/ref_v63" --set model.vocab_size=63 > "$WORK/ref_v63.log" 2>&1 || fail "vocab 63"
launch 4 "$WORK/tp4_v63" --set parallel.tp=4 --set model.vocab_size=63
echo -n "tp=4 with vocab 63 (padded to 64) vs one process: "
compare_losses "$WORK/tp4_v63" "$WORK/ref_v63" || fail "padding the vocabulary changed the losses"

# Dropout on: the same seed twice gives the same losses, bit for bit.
for run in a b; do
  launch 4 "$WORK/dropout_$run" --set parallel.tp=2 --set parallel.sequence_parallel=true --set model.dropout=0.1
done
python3 "$LOOM_SOURCE/tests/scripts/compare_metrics.py" "$WORK/dropout_a/metrics.jsonl" "$WORK/dropout_b/metrics.jsonl" \
  --rtol 0 || fail "two dropout runs with the same seed differ"
if compare_losses "$WORK/dropout_a" "$WORK/np4_tp2_spfalse" > /dev/null; then fail "dropout changed nothing"; fi

# Traffic of the tp group, from rank 0's counters, against the count per layer
# and micro-batch. tiny.yaml: L=2 layers, B=2 micro-batch, S=32, H=32, vocab 64, 20 steps,
# global batch 8 -> 4 micro-batches per step at dp=1.
python3 - "$WORK" << 'PY'
import json, sys
work = sys.argv[1]
L, B, S, H, V, steps, micro = 2, 2, 32, 32, 64, 20, 4
bsh = B * S * H * 4  # bytes of one [B, S, H] fp32 activation
ce = (B * S + 2 * B * S) * 4  # the loss: the max, then the exponential sum and target logit together

def tp_counters(name):
    return json.load(open(f"{work}/{name}/comm_rank0.json"))["tp"]

# Without SP, per micro-batch: forward one all-reduce per attention and per MLP
# plus the embedding's, backward one per attention and per MLP plus the output
# layer's input; then the loss's two.
c = tp_counters("np2_tp2_spfalse")
calls = steps * micro * (4 * L + 2 + 2)
assert c["all_reduce"]["calls"] == calls, (c["all_reduce"]["calls"], calls)
assert c["all_reduce"]["bytes"] == steps * micro * ((4 * L + 2) * bsh + ce), (c["all_reduce"]["bytes"],)
assert set(c) == {"all_reduce"}, c.keys()

# With SP, each all-reduce of an activation becomes an all-gather / reduce-scatter pair
# over the sequence; the sequence-parallel gradients (norms, row biases, wpe) add one
# all-reduce per step.
c = tp_counters("np2_tp2_sptrue")
pairs = steps * micro * (4 * L + 2)
for op in ("all_gather", "reduce_scatter"):
    assert c[op]["calls"] == pairs, (op, c[op]["calls"], pairs)
    assert c[op]["bytes"] == pairs * bsh, (op, c[op]["bytes"], pairs * bsh)
sp_grads = (L * (4 * H + 2 * H) + 2 * H + S * H) * 4
assert c["all_reduce"]["calls"] == steps * (micro * 2 + 1), c["all_reduce"]["calls"]
assert c["all_reduce"]["bytes"] == steps * (micro * ce + sp_grads), c["all_reduce"]["bytes"]
print("tp traffic matches the count per layer and micro-batch, with and without SP")
PY
echo "tp equivalence: ok"
