#!/usr/bin/env bash
# Context parallelism (parallel.cp): each sequence split over cp ranks, chunks r and 2cp-1-r on rank
# r, attention by ring (cp_comm p2p) or all-to-all (a2a). A GPT-2-shaped model (learned positions)
# and a Llama-shaped one (RoPE, grouped-query attention 4/2, two layers) train to one process's losses within
# 1e-5 relative for 20 steps at cp 2 and 4 in both modes (a2a where the heads divide: cp 4 and tp 2
# for the GPT only), alone, with tp 2 (+SP), with pp 2, with dp 2 and ZeRO 3 or 1, with full and
# selective recomputation, and their validation losses too; MoE at cp 2 (ring, all-to-all with ep 2,
# tp 2 + SP), with the batch and the sequence-wise balance loss; a checkpoint
# saved at cp 2 resumes at cp 1 and at tp 2 with the uninterrupted losses; the ring's traffic per
# cp group is exactly (cp - 1) key/value shards forward and twice that backward per layer and
# micro-batch; with dropout (masks keyed by global position, parallel/keyed_dropout.h) cp 2 and 4,
# ring and all-to-all, with tp 2 + SP and with recomputation drop the same elements: their losses
# agree within 1e-5 of each other and differ from a run without dropout; bad cp settings exit 2
# naming the key.
source "$(dirname "$0")/common.sh"
GPT="$TINY"
LLAMA="$LOOM_SOURCE/tests/configs/llama_tiny.yaml"
# Micro-batches of 4 (two a step at dp 1): each sends its own ring of keys and values per layer,
# and the ring's correctness does not depend on how many there are (this test: 226 s -> 185 s).
SEQ=(--set model.seq_len=32 --set train.micro_batch_size=4)

run() {  # run NP CONFIG NAME [--set ...]
  local np="$1" config="$2" name="$3" layers=()
  shift 3
  # Two of llama_tiny's 8 layers (the 8 are for pp 4 x 2 virtual stages; here pp is at most 2):
  # the ring runs per layer, so 8 layers took three times as long and checked nothing more.
  [ "$config" = "$LLAMA" ] && layers=(--set model.num_layers=2)
  mpirun --oversubscribe -np "$np" "$LOOM" train "$config" --run-dir "$WORK/$name" "${SEQ[@]}" "${layers[@]}" "$@" \
    > "$WORK/$name.log" 2>&1 < /dev/null || { cat "$WORK/$name.log"; fail "run $name"; }
}

# run_layout CONFIG "NP NAME KEY=VALUE..." [args...]: run() with each KEY=VALUE as a --set, then ARGS;
# leaves the layout's NAME in $name.
run_layout() {
  local config="$1" np sets=() rest
  read -r np name rest <<< "$2"
  shift 2
  for s in $rest; do sets+=(--set "$s"); done
  run "$np" "$config" "$name" "${sets[@]}" "$@"
}

for model in gpt llama; do
  config="$GPT"
  [ "$model" = llama ] && config="$LLAMA"
  run 1 "$config" "${model}_ref" --set data.split=90,10,0 --set eval.interval=10 --set eval.steps=1
  while read -r models np name sets; do
    [[ "$models" == all || "$models" == "$model" ]] || continue
    args=()
    for s in $sets; do args+=(--set "$s"); done
    run "$np" "$config" "${model}_$name" "${args[@]}" --set data.split=90,10,0 --set eval.interval=10 --set eval.steps=1
    echo -n "$model $name vs one process: "
    compare_losses "$WORK/${model}_$name" "$WORK/${model}_ref" || fail "$model $name differs from one process"
    python3 "$SCRIPTS/checks.py" validation-agree "$WORK/${model}_$name" "$WORK/${model}_ref" --rtol 1e-5 \
      --steps 10,20 --label "  validation" || fail "$model $name: validation differs"
  done << 'LAYOUTS'
all 2 cp2 parallel.cp=2
all 4 cp4 parallel.cp=4
all 2 cp2_a2a parallel.cp=2 parallel.cp_comm=a2a
gpt 4 cp4_a2a parallel.cp=4 parallel.cp_comm=a2a
all 4 cp2_tp2_sp parallel.cp=2 parallel.tp=2 parallel.sequence_parallel=true
gpt 4 cp2_a2a_tp2_sp parallel.cp=2 parallel.cp_comm=a2a parallel.tp=2 parallel.sequence_parallel=true
all 4 cp2_pp2 parallel.cp=2 parallel.pp=2
all 4 cp2_a2a_pp2 parallel.cp=2 parallel.cp_comm=a2a parallel.pp=2
all 4 cp2_dp2_zero3 parallel.cp=2 parallel.zero_stage=3
all 4 cp2_a2a_dp2_zero1 parallel.cp=2 parallel.cp_comm=a2a parallel.zero_stage=1
all 2 cp2_recompute_selective parallel.cp=2 train.recompute=selective
all 2 cp2_a2a_recompute_full parallel.cp=2 parallel.cp_comm=a2a train.recompute=full
LAYOUTS
done

grep -q "| tp=1 pp=1 dp=1 cp=2 ep=1 |" "$WORK/gpt_cp2.log" || { head -3 "$WORK/gpt_cp2.log"; fail "the banner should show cp"; }

# Mixture of Experts: the auxiliary losses' statistics summed over cp (whole sequences), large
# coefficients so a wrong share of their gradient would show; runs agree up to a routing near-tie flip.
MOE=(--set model.moe.num_experts=4 --set model.moe.top_k=2 --set model.moe.aux_loss_coeff=1.0 --set model.moe.z_loss_coeff=0.1)
# The sequence-wise balance loss (model.moe.aux_loss_type=sequence) sums each sequence's statistics
# over the ranks that hold its parts: cp, and tp under SP.
run 1 "$GPT" moe_ref "${MOE[@]}"
run 1 "$GPT" moe_seq_ref "${MOE[@]}" --set model.moe.aux_loss_type=sequence
for layout in "2 moe_cp2 parallel.cp=2" "4 moe_cp2_a2a_ep2 parallel.cp=2 parallel.cp_comm=a2a parallel.ep=2" \
  "4 moe_cp2_tp2_sp parallel.cp=2 parallel.tp=2 parallel.sequence_parallel=true" \
  "4 moe_seq_cp2_tp2_sp parallel.cp=2 parallel.tp=2 parallel.sequence_parallel=true model.moe.aux_loss_type=sequence" \
  "4 moe_seq_cp2_a2a_ep2 parallel.cp=2 parallel.cp_comm=a2a parallel.ep=2 model.moe.aux_loss_type=sequence"; do
  run_layout "$GPT" "$layout" "${MOE[@]}"
  ref=moe_ref
  [[ "$name" == moe_seq_* ]] && ref=moe_seq_ref
  echo -n "$name vs one process: "
  python3 "$SCRIPTS/checks.py" compare-metrics "$WORK/$name/metrics.jsonl" "$WORK/$ref/metrics.jsonl" --rtol 1e-5 \
    --routing-flips || fail "$name differs from one process"
done
python3 - "$WORK/moe_ref" "$WORK/moe_seq_ref" "$WORK/moe_seq_cp2_tp2_sp" "$WORK/moe_seq_cp2_a2a_ep2" << 'PY'
import json, sys
runs = [[json.loads(line) for line in open(f"{run}/metrics.jsonl")] for run in sys.argv[1:]]
batch, seq = ([r["moe"]["aux_loss"] for r in run] for run in runs[:2])
print(f"balance loss at step 1: batch {batch[0]:.6f}, sequence {seq[0]:.6f}")
assert abs(batch[0] - seq[0]) > 1e-4, "the sequence-wise loss should differ from the batch one"
# Training feels the type: the language-model losses part once the two balance losses have moved the routers.
gap = max(abs(a["loss"] - b["loss"]) for a, b in zip(*runs[:2]))
print(f"batch against sequence balance loss: largest training-loss difference {gap:.2e}")
assert gap > 1e-4, "the balance loss's type changed nothing in training"
# The sequence-wise figure itself, step 1 (before any routing flip), equals one process's at cp 2 x tp 2 + SP
# and at cp 2 x ep 2: each sequence's parts are summed over the ranks that hold them.
for name, run in zip(sys.argv[3:], runs[2:]):
    got = run[0]["moe"]["aux_loss"]
    assert abs(got - seq[0]) <= 1e-5 * abs(seq[0]), f"{name}: step 1 balance loss {got} against one process's {seq[0]}"
    print(f"{name.rsplit('/', 1)[-1]}: step 1 sequence-wise balance loss {got:.8f} (one process {seq[0]:.8f})")
PY

# The traffic of every group, the cp group's ring and all-to-all included, is what `loom plan --run`
# predicts, call for call and byte for byte (no validation: its forwards are not in the model's step).
for layout in "4 traffic_ring_zero3 parallel.cp=2 parallel.zero_stage=3 train.recompute=selective" \
  "8 traffic_a2a_tp2_pp2 parallel.cp=2 parallel.cp_comm=a2a parallel.tp=2 parallel.sequence_parallel=true parallel.pp=2" \
  "4 traffic_ring_cp4_bf16 parallel.cp=4 train.precision=bf16 train.recompute=full"; do
  run_layout "$GPT" "$layout" --set train.steps=4 --set train.warmup_steps=1
  "$LOOM" plan --run "$WORK/$name" > "$WORK/$name.plan" || { cat "$WORK/$name.plan"; fail "loom plan --run $name"; }
  python3 "$SCRIPTS/checks.py" plan-vs-run "$WORK/$name" || fail "$name: traffic differs from the prediction"
done

# cp does not change what is saved: a checkpoint of step 10 at cp 2 (Llama, RoPE) resumes at cp 1
# and at tp 2 with the uninterrupted run's losses.
run 2 "$LLAMA" llama_saved_cp2 --set parallel.cp=2 --set checkpoint.dir="$WORK/ck" --set train.exit_after=10
run 2 "$LLAMA" llama_straight_cp2 --set parallel.cp=2
for layout in "1 resumed_cp1" "2 resumed_tp2 parallel.tp=2" "4 resumed_cp4 parallel.cp=4"; do
  run_layout "$LLAMA" "$layout" --resume "$WORK/ck/step_00000010"
  compare_resumed "$WORK/$name" "$WORK/llama_straight_cp2" 11 20 "saved at cp 2, $name" ||
    fail "$name differs from the uninterrupted run"
done

# bf16 at cp 2 tracks fp32 (the ring merges in fp32).
run 2 "$GPT" bf16_cp2 --set parallel.cp=2 --set train.precision=bf16 --set data.split=90,10,0 --set eval.interval=10 --set eval.steps=1
python3 "$SCRIPTS/checks.py" learns "$WORK/bf16_cp2" --by 0.3 --ends-near "$WORK/gpt_ref" --within 0.05 ||
  fail "bf16 at cp 2 does not track fp32"

# Dropout under cp: every layout of the sequence over cp (and tp, SP) drops the same elements.
for layout in "2 drop_cp2 parallel.cp=2" "4 drop_cp4 parallel.cp=4" "2 drop_cp2_a2a parallel.cp=2 parallel.cp_comm=a2a" \
  "4 drop_cp2_tp2_sp parallel.cp=2 parallel.tp=2 parallel.sequence_parallel=true" \
  "4 drop_cp4_selective parallel.cp=4 train.recompute=selective" "2 drop_cp2_full parallel.cp=2 train.recompute=full"; do
  run_layout "$GPT" "$layout" --set model.dropout=0.1
  [ "$name" = drop_cp2 ] && continue
  echo -n "$name vs drop_cp2: "
  compare_losses "$WORK/$name" "$WORK/drop_cp2" || fail "$name drops other elements than cp 2"
done
run 2 "$GPT" nodrop_cp2 --set parallel.cp=2
python3 - "$WORK/drop_cp2" "$WORK/nodrop_cp2" << 'PY'
import json, sys
drop, plain = ([json.loads(line)["loss"] for line in open(f"{run}/metrics.jsonl")] for run in sys.argv[1:])
largest = max(abs(a - b) for a, b in zip(drop, plain))
print(f"cp 2 with dropout 0.1 against without: largest loss difference {largest:.4f} over 20 steps")
assert largest > 1e-2, "dropout changed nothing"
PY

# Long sequences: at seq 4096 the activation peak of every rank at cp 4 is at most 30% of one
# process's (the memory report of the first step), in both modes. One process's attention is
# LibTorch's flash kernel, linear in S like the rest, so cp divides the saved activations by 4 and
# adds the ring's buffers in flight (keys, values and their gradients: a few [S / cp, h] tensors,
# for the one layer being computed). Two layers, so that those buffers are not a third of a
# one-layer model's whole: 0.287x here (one layer: 0.303x).
LONG=(--set model.seq_len=4096 --set model.num_layers=2 --set train.global_batch_size=1 --set train.micro_batch_size=1
  --set train.steps=1 --set train.warmup_steps=0)
SEQ=()
run 1 "$GPT" long_cp1 "${LONG[@]}"
run 4 "$GPT" long_cp4 "${LONG[@]}" --set parallel.cp=4
run 4 "$GPT" long_cp4_a2a "${LONG[@]}" --set parallel.cp=4 --set parallel.cp_comm=a2a
python3 - "$WORK/long_cp1" "$WORK/long_cp4" "$WORK/long_cp4_a2a" << 'PY'
import json, sys
peaks = [[m["activation_peak_bytes"] for m in json.loads(open(f"{run}/metrics.jsonl").readline())["memory"]]
         for run in sys.argv[1:]]
one = peaks[0][0]
for mode, ranks in zip(["ring", "a2a"], peaks[1:]):
    print(f"activation peak at seq 4096: one process {one / 2**20:.1f} MiB, cp 4 {mode} ranks "
          + ", ".join(f"{p / 2**20:.1f}" for p in ranks) + f" MiB (largest {max(ranks) / one:.3f}x)")
    assert len(ranks) == 4 and max(ranks) <= 0.3 * one, f"cp 4 {mode} should hold at most 30% of one process's activations"
PY

# Bad settings exit 2 naming the key, on every rank, before any step.
refuse() {  # refuse NP CONFIG PATTERN [--set ...]
  local np="$1" config="$2" pattern="$3" code=0
  shift 3
  mpirun --oversubscribe -np "$np" "$LOOM" train "$config" --run-dir "$WORK/refused" "$@" > "$WORK/refused.log" 2>&1 \
    < /dev/null || code=$?
  [ "$code" = 2 ] && grep -q -- "$pattern" "$WORK/refused.log" || { cat "$WORK/refused.log"; fail "expected exit 2 with '$pattern', got $code"; }
  echo "refused: $pattern"
}
refuse 2 "$GPT" "model.seq_len': 30 is not divisible by 2 \* parallel.cp = 4" --set parallel.cp=2 --set model.seq_len=30
refuse 4 "$LLAMA" "config key 'parallel.cp_comm': a2a splits each tp rank's 4 heads and 2 kv heads over parallel.cp = 4" \
  --set parallel.cp=4 --set parallel.cp_comm=a2a
refuse 2 "$GPT" "config key 'parallel.cp_comm': must be p2p or a2a" --set parallel.cp=2 --set parallel.cp_comm=ring
echo "cp_equivalence: all checks passed"
