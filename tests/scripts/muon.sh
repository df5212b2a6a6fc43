#!/usr/bin/env bash
# Muon (train.optimizer: muon) against a plain PyTorch Muon written from its definition
# (tests/reference/muon_reference.py): a tiny GPT-2 and a tiny Llama saved by transformers'
# save_pretrained train 20 steps in loom from their directories with every step's loss within
# 1e-5 of the reference's: weight decay on, each group its own peak lr, Nesterov on and off, and
# the groups moved by name pattern (train.muon.include / exclude).
# Layouts: dp 2, tp 2 with sequence parallelism (the shards gathered), ZeRO-1, 2 and 3 at dp 2
# (layer-wise ownership), pp 2, cp 2, pp 2 x dp 2, tp 2 x pp 2 x dp 2 with ZeRO-1, tp 2 x dp 2 with
# ZeRO-3, a Llama with grouped-query attention at tp 2, and ep 2 (MoE, also at tp 2 x ep 2 with
# ZeRO-1 and dp 4 x ep 2 with ZeRO-3) give one process's losses within 1e-5; a checkpoint resumes
# bit for bit, and at another layout within 1e-5 (one process to tp 2 x dp 2 with ZeRO-1 and back,
# and from dp 2 with ZeRO-3); resuming an AdamW checkpoint with Muon, or with other Muon groups,
# and a pattern that matches no parameter are refused (exit 2).
source "$(dirname "$0")/common.sh"
PY=python3  # the project venv's (first on PATH under ctest), with transformers
cat "$LOOM_SOURCE/README.md" "$LOOM_SOURCE/CMakeLists.txt" > "$WORK/text.txt"
"$LOOM" prepare --input "$WORK/text.txt" --output "$WORK/ds" > /dev/null || fail "prepare"
SHAPE=(--set model.num_layers=2 --set model.hidden_size=64 --set model.num_heads=4 --set model.vocab_size=256
  --set data.path="$WORK/ds" --set model.dropout=0 --set train.global_batch_size=8 --set train.micro_batch_size=8)
MUON=(--set train.optimizer=muon --set train.steps=20 --set train.warmup_steps=2 --set train.lr=0.003
  --set train.min_lr=0.0003 --set train.weight_decay=0.1 --set train.muon.lr=0.02 --set train.muon.weight_decay=0.05)
REF=(--steps 20 --lr 0.003 --min-lr 0.0003 --warmup 2 --weight-decay 0.1 --muon-lr 0.02 --muon-weight-decay 0.05)

# 1. Against the reference: the models made, then every reference run in one Python process
# (tests/reference/batch.py; transformers imports in 8-9 s here).
printf 'hf_models.py make %s %s\n' gpt2 "$WORK/gpt2" llama "$WORK/llama" > "$WORK/make.txt"
"$PY" "$LOOM_SOURCE/tests/reference/batch.py" "$WORK/make.txt" > /dev/null || fail "making the models"
train() {  # train NAME [args...]: one process
  local name="$1"
  shift
  "$LOOM" train "$TINY" --run-dir "$WORK/$name" "${SHAPE[@]}" "${MUON[@]}" "$@" > "$WORK/$name.log" 2>&1 ||
    { cat "$WORK/$name.log"; fail "loom train $name"; }
}
train gpt2 --set model.init_from="$WORK/gpt2"
train llama --set model.init_from="$WORK/llama"
train llama_plain --set model.init_from="$WORK/llama" --set train.muon.nesterov=false
train llama_groups --set model.init_from="$WORK/llama" --set train.muon.include=lm_head \
  --set train.muon.exclude='h.*.attn.proj.weight'
# GPT-2; Llama; Llama with Nesterov off; Llama with the groups moved by name pattern; and the check
# can fail: another momentum on the reference's side misses (a `!` line must fail).
cat > "$WORK/check.txt" << LINES
muon_reference.py $WORK/gpt2 $WORK/text.txt $WORK/gpt2 ${REF[*]}
muon_reference.py $WORK/llama $WORK/text.txt $WORK/llama ${REF[*]}
muon_reference.py $WORK/llama $WORK/text.txt $WORK/llama_plain ${REF[*]} --no-nesterov
muon_reference.py $WORK/llama $WORK/text.txt $WORK/llama_groups ${REF[*]} --include-re '^lm_head\\.weight\$' --exclude-re 'self_attn\\.o_proj\\.weight\$'
!muon_reference.py $WORK/llama $WORK/text.txt $WORK/llama ${REF[*]} --momentum 0.9
LINES
"$PY" "$LOOM_SOURCE/tests/reference/batch.py" "$WORK/check.txt" || fail "Muon differs from the reference (the line above)"

# 2. Layouts against one process (the tiny GPT, from scratch).
LAYOUT=("${MUON[@]}" --set model.dropout=0)
run_loom 1 one "${LAYOUT[@]}" || { cat "$WORK/one.log"; fail "one process"; }
for layout in "dp2:2:" "tp2sp:2:--set parallel.tp=2 --set parallel.sequence_parallel=true" \
  "zero1:2:--set parallel.zero_stage=1" "zero2:2:--set parallel.zero_stage=2" "zero3:2:--set parallel.zero_stage=3" \
  "tp2dp2z3:4:--set parallel.tp=2 --set parallel.zero_stage=3 --set parallel.sequence_parallel=true" \
  "pp2:2:--set parallel.pp=2" "cp2:2:--set parallel.cp=2" \
  "pp2dp2:4:--set parallel.pp=2" \
  "tp2pp2dp2z1:8:--set parallel.tp=2 --set parallel.pp=2 --set parallel.zero_stage=1 --set parallel.sequence_parallel=true"; do
  IFS=: read -r name np args <<< "$layout"
  # shellcheck disable=SC2086
  run_loom "$np" "$name" "${LAYOUT[@]}" $args || { cat "$WORK/$name.log"; fail "$name"; }
  compare_losses "$WORK/$name" "$WORK/one" || fail "Muon at $name differs from one process"
  echo "Muon at $name: one process's losses within 1e-5"
done
MOE=(--set model.moe.num_experts=2 --set model.moe.top_k=1)
run_loom 1 moe_one "${LAYOUT[@]}" "${MOE[@]}" || { cat "$WORK/moe_one.log"; fail "MoE one process"; }
run_loom 2 moe_ep2 "${LAYOUT[@]}" "${MOE[@]}" --set parallel.ep=2 || { cat "$WORK/moe_ep2.log"; fail "MoE ep 2"; }
python3 "$SCRIPTS/checks.py" compare-metrics "$WORK/moe_ep2/metrics.jsonl" "$WORK/moe_one/metrics.jsonl" --rtol 1e-5 \
  --routing-flips || fail "Muon on an MoE at ep 2 differs from one process"
echo "Muon on an MoE at ep 2: one process's losses within 1e-5"
run_loom 4 moe_tp2ep2z1 "${LAYOUT[@]}" "${MOE[@]}" --set parallel.ep=2 --set parallel.tp=2 --set parallel.zero_stage=1 ||
  { cat "$WORK/moe_tp2ep2z1.log"; fail "MoE tp 2 x ep 2, ZeRO-1"; }
python3 "$SCRIPTS/checks.py" compare-metrics "$WORK/moe_tp2ep2z1/metrics.jsonl" "$WORK/moe_one/metrics.jsonl" --rtol 1e-5 \
  --routing-flips || fail "Muon on an MoE at tp 2 x ep 2 with ZeRO-1 differs from one process"
echo "Muon on an MoE at tp 2 x ep 2 with ZeRO-1: one process's losses within 1e-5"
run_loom 4 moe_dp4ep2z3 "${LAYOUT[@]}" "${MOE[@]}" --set parallel.ep=2 --set parallel.zero_stage=3 ||
  { cat "$WORK/moe_dp4ep2z3.log"; fail "MoE dp 4 x ep 2, ZeRO-3"; }
python3 "$SCRIPTS/checks.py" compare-metrics "$WORK/moe_dp4ep2z3/metrics.jsonl" "$WORK/moe_one/metrics.jsonl" --rtol 1e-5 \
  --routing-flips || fail "Muon on an MoE at dp 4 x ep 2 with ZeRO-3 differs from one process"
echo "Muon on an MoE at dp 4 x ep 2 with ZeRO-3: one process's losses within 1e-5"
GQA=(--set model.arch=llama --set model.num_kv_heads=2)
run_loom 1 gqa_one "${LAYOUT[@]}" "${GQA[@]}" || { cat "$WORK/gqa_one.log"; fail "GQA one process"; }
run_loom 2 gqa_tp2 "${LAYOUT[@]}" "${GQA[@]}" --set parallel.tp=2 || { cat "$WORK/gqa_tp2.log"; fail "GQA tp 2"; }
compare_losses "$WORK/gqa_tp2" "$WORK/gqa_one" || fail "Muon on a GQA Llama at tp 2 differs from one process"
echo "Muon on a Llama with grouped-query attention at tp 2: one process's losses within 1e-5"

# A vocabulary tp pads (63 over tp 2), its embedding given to Muon: the padding row is left out.
PAD=(--set model.vocab_size=63 --set train.muon.include=wte)
run_loom 1 pad_one "${LAYOUT[@]}" "${PAD[@]}" || { cat "$WORK/pad_one.log"; fail "padded vocabulary, one process"; }
run_loom 2 pad_tp2 "${LAYOUT[@]}" "${PAD[@]}" --set parallel.tp=2 || { cat "$WORK/pad_tp2.log"; fail "padded vocabulary, tp 2"; }
compare_losses "$WORK/pad_tp2" "$WORK/pad_one" || fail "Muon on a tp-padded embedding differs from one process"
echo "Muon on an embedding tp pads (vocabulary 63 at tp 2): one process's losses within 1e-5"

# 3. Checkpoints: resumed bit for bit, and at another layout within 1e-5: one process's at
# tp 2 x dp 2 with ZeRO-1 (each owner takes its momenta), and that layout's back in one process.
run_loom 1 half "${LAYOUT[@]}" --set checkpoint.dir="$WORK/ck" --set train.exit_after=10 || { cat "$WORK/half.log"; fail "half"; }
run_loom 1 resumed "${LAYOUT[@]}" --set checkpoint.dir="$WORK/ck" --resume auto || { cat "$WORK/resumed.log"; fail "resume"; }
python3 "$SCRIPTS/checks.py" steps-agree "$WORK/resumed" "$WORK/one" --rtol 0 --first 11 --last 20 --same-samples ||
  fail "Muon resumed differs from the straight run"
Z1=(--set parallel.tp=2 --set parallel.zero_stage=1)
run_loom 4 resumed_z1 "${LAYOUT[@]}" "${Z1[@]}" --resume "$WORK/ck/step_00000010" ||
  { cat "$WORK/resumed_z1.log"; fail "resume at tp 2 x dp 2, ZeRO-1"; }
python3 "$SCRIPTS/checks.py" steps-agree "$WORK/resumed_z1" "$WORK/one" --rtol 1e-5 --first 11 --last 20 ||
  fail "Muon resumed at tp 2 x dp 2 with ZeRO-1 differs"
run_loom 4 half_z1 "${LAYOUT[@]}" "${Z1[@]}" --set checkpoint.dir="$WORK/ck_z1" --set train.exit_after=10 ||
  { cat "$WORK/half_z1.log"; fail "half at tp 2 x dp 2, ZeRO-1"; }
run_loom 1 resumed_from_z1 "${LAYOUT[@]}" --resume "$WORK/ck_z1/step_00000010" ||
  { cat "$WORK/resumed_from_z1.log"; fail "resume from tp 2 x dp 2, ZeRO-1"; }
python3 "$SCRIPTS/checks.py" steps-agree "$WORK/resumed_from_z1" "$WORK/one" --rtol 1e-5 --first 11 --last 20 ||
  fail "Muon saved at tp 2 x dp 2 with ZeRO-1 and resumed in one process differs"
run_loom 2 half_z3 "${LAYOUT[@]}" --set parallel.zero_stage=3 --set checkpoint.dir="$WORK/ck_z3" --set train.exit_after=10 ||
  { cat "$WORK/half_z3.log"; fail "half at dp 2, ZeRO-3"; }
run_loom 1 resumed_from_z3 "${LAYOUT[@]}" --resume "$WORK/ck_z3/step_00000010" ||
  { cat "$WORK/resumed_from_z3.log"; fail "resume from dp 2, ZeRO-3"; }
python3 "$SCRIPTS/checks.py" steps-agree "$WORK/resumed_from_z3" "$WORK/one" --rtol 1e-5 --first 11 --last 20 ||
  fail "Muon saved at dp 2 with ZeRO-3 and resumed in one process differs"
echo "Muon checkpoints: resumed bit for bit, across one process and tp 2 x dp 2 with ZeRO-1, from ZeRO-3, within 1e-5"

# 4. Refusals.
run_loom 1 adamw --set train.steps=4 --set train.warmup_steps=1 --set checkpoint.dir="$WORK/ck_adamw" --set train.exit_after=2 ||
  { cat "$WORK/adamw.log"; fail "adamw"; }
code=0
run_loom 1 adamw_as_muon "${LAYOUT[@]}" --set checkpoint.dir="$WORK/ck_adamw" --resume auto || code=$?
[ "$code" = 2 ] && grep -q "trained with train.optimizer = adamw, the config has muon" "$WORK/adamw_as_muon.log" ||
  { cat "$WORK/adamw_as_muon.log"; fail "resuming an AdamW checkpoint with Muon should be refused (exit $code)"; }
code=0
run_loom 1 unmatched "${LAYOUT[@]}" --set train.muon.exclude='h.*.attn.o_proj.weight' || code=$?
[ "$code" = 2 ] && grep -q "config key 'train.muon.exclude': 'h.\*.attn.o_proj.weight' matches no parameter" "$WORK/unmatched.log" ||
  { cat "$WORK/unmatched.log"; fail "a pattern matching nothing should be refused (exit $code)"; }
code=0
run_loom 1 regrouped "${LAYOUT[@]}" --set checkpoint.dir="$WORK/ck" --resume auto --set train.muon.exclude='h.0.*' || code=$?
[ "$code" = 2 ] && grep -q "trained with train.muon.exclude = '', the config has 'h.0.\*'" "$WORK/regrouped.log" ||
  { cat "$WORK/regrouped.log"; fail "resuming with other Muon groups should be refused (exit $code)"; }
echo "muon: ok"
