#!/usr/bin/env bash
# Hugging Face's transformers as the reference (tests/reference/hf_models.py): a tiny GPT-2, Llama
# (rope_theta 50000, untied, GQA), Mistral, Qwen2 (q, k, v biases, tied), Qwen3 (q/k norms, head_dim
# 32 at hidden 64), Mixtral, Qwen3-MoE (4 experts, top 2) and DeepSeek-V3 (latent attention, YaRN,
# grouped sigmoid routing with its expert bias, a shared expert; at tp 2 x ep 2 x pp 2 too) made at
# random and saved with save_pretrained (transformers 5's config.json: rope_parameters, dtype) train in loom from
# their directories (model.init_from) with transformers' loss on the same first batch within 1e-5,
# in one process and at tp 2 x pp 2; a Mistral whose sliding_window is the sequence's length trains
# to transformers' loss too (every token sees its whole sequence within the window), one whose window
# is shorter is refused naming sliding_window, and generate holds prompt and new tokens within the
# window; loom's exports of each load with from_pretrained with no missing,
# unexpected or mismatched key and give the original's logits within 1e-5; greedy `loom generate`
# equals transformers' generate token for token (the MoEs' too).
source "$(dirname "$0")/common.sh"
PY=python3  # the project venv's (first on PATH under ctest), with transformers
REF="$LOOM_SOURCE/tests/reference"
# The reference commands run in two batches (tests/reference/batch.py), one Python process each:
# transformers imports in 8-9 s here, and one process per command spent most of this test on it.
MAKE="$WORK/make.txt"    # phase 1: the models transformers draws
CHECK="$WORK/check.txt"  # phase 3: transformers' losses, logits and ids against loom's runs of phase 2
for arch in gpt2 llama mistral qwen2 qwen3 mixtral qwen3_moe deepseek_v3; do
  echo "hf_models.py make $arch $WORK/$arch" >> "$MAKE"
done
echo "hf_models.py make mistral $WORK/mistral_sw --sliding-window 16" >> "$MAKE"
echo "hf_models.py make mistral $WORK/mistral_sw32 --sliding-window 32" >> "$MAKE"
echo "hf_models.py make deepseek_v3 $WORK/deepseek_v3_unshared --n-shared-experts 0" >> "$MAKE"
"$PY" "$REF/batch.py" "$MAKE" > /dev/null || fail "making the models"

cat "$LOOM_SOURCE/README.md" "$LOOM_SOURCE/CMakeLists.txt" > "$WORK/text.txt"
"$LOOM" prepare --input "$WORK/text.txt" --output "$WORK/ds" > /dev/null || fail "prepare"
BASE=(--set model.num_layers=2 --set model.hidden_size=64 --set model.num_heads=4 --set model.vocab_size=256
  --set data.path="$WORK/ds" --set model.dropout=0)
ONE_STEP=(--set train.steps=1 --set train.warmup_steps=0)
COMPARE="--seq-len 32 --sequences 8"

for arch in gpt2 llama mistral mistral_sw32 qwen2 qwen3; do
  "$LOOM" train "$TINY" --run-dir "$WORK/${arch}_one" "${BASE[@]}" "${ONE_STEP[@]}" --set model.init_from="$WORK/$arch" \
    > "$WORK/${arch}_one.log" 2>&1 || { cat "$WORK/${arch}_one.log"; fail "$arch in one process"; }
  mpirun --oversubscribe -np 4 "$LOOM" train "$TINY" --run-dir "$WORK/${arch}_tp2pp2" "${BASE[@]}" "${ONE_STEP[@]}" \
    --set parallel.tp=2 --set parallel.pp=2 --set model.init_from="$WORK/$arch" \
    > "$WORK/${arch}_tp2pp2.log" 2>&1 || { cat "$WORK/${arch}_tp2pp2.log"; fail "$arch at tp 2 x pp 2"; }

  # Export of the initial state (exit_after 0): from_pretrained takes it whole, with the original's logits.
  "$LOOM" train "$TINY" --run-dir "$WORK/${arch}_save" "${BASE[@]}" --set model.init_from="$WORK/$arch" \
    --set checkpoint.dir="$WORK/${arch}_ck" --set train.exit_after=0 > "$WORK/${arch}_save.log" 2>&1 ||
    { cat "$WORK/${arch}_save.log"; fail "$arch: saving the initial state"; }
  # --format hf: the source's architecture and fields (max_position_embeddings 64 though trained at 32,
  # bos/eos ids, rope settings, sliding_window) and its generation_config.json.
  "$LOOM" export "$WORK/${arch}_ck/step_00000000" --format hf --output "$WORK/${arch}_export" > /dev/null ||
    fail "$arch: export"
  # Phase 3 checks loom's first losses against transformers', and the export's logits and fields.
  echo "hf_models.py compare-loss $WORK/$arch $WORK/text.txt $WORK/${arch}_one $WORK/${arch}_tp2pp2 $COMPARE" \
    "--export $WORK/${arch}_export --same-architecture" >> "$CHECK"
done
# Mixtral (a mixture of experts in every block), Qwen3-MoE (q/k norms, head_dim 32 at hidden 64,
# block 0 dense, the top two weights not renormalised) and DeepSeek-V3 (latent attention with a query
# latent, values narrower than the keys, interleaved rotary features under YaRN; a sigmoid router
# choosing the best 2 of 4 groups, then 2 of 8 experts, with e_score_correction_bias, x2.5; a shared
# expert; block 0 dense): transformers' first loss in one process and
# at tp 2 x ep 2 x pp 2 (Qwen3-MoE's and DeepSeek-V3's experts split over tp: parallel.expert_tp 2,
# each rank reading its slices of the experts' tensors), and the export of the initial state loads as the same class with the same
# logits. A Mixtral config.json with a sliding window is refused naming it.
for arch in mixtral qwen3_moe deepseek_v3; do
  MOE_RUN=(--set model.moe.aux_loss_coeff=0.01 --set model.moe.z_loss_coeff=0.001)
  # DeepSeek-V3's four blocks (block 0 dense): pp 2 takes two each.
  [ "$arch" = deepseek_v3 ] && MOE_RUN+=(--set model.num_layers=4)
  SPLIT=()
  [ "$arch" != mixtral ] && SPLIT=(--set parallel.expert_tp=2)
  "$LOOM" train "$TINY" --run-dir "$WORK/${arch}_one" "${BASE[@]}" "${ONE_STEP[@]}" "${MOE_RUN[@]}" \
    --set model.init_from="$WORK/$arch" > "$WORK/${arch}_one.log" 2>&1 ||
    { cat "$WORK/${arch}_one.log"; fail "$arch in one process"; }
  mpirun --oversubscribe -np 8 "$LOOM" train "$TINY" --run-dir "$WORK/${arch}_tp2ep2pp2" "${BASE[@]}" "${ONE_STEP[@]}" \
    "${MOE_RUN[@]}" "${SPLIT[@]}" --set parallel.tp=2 --set parallel.ep=2 --set parallel.pp=2 \
    --set model.init_from="$WORK/$arch" > "$WORK/${arch}_tp2ep2pp2.log" 2>&1 || { cat "$WORK/${arch}_tp2ep2pp2.log"; fail "$arch at tp 2 x ep 2 x pp 2"; }
  "$LOOM" train "$TINY" --run-dir "$WORK/${arch}_save" "${BASE[@]}" "${MOE_RUN[@]}" --set model.init_from="$WORK/$arch" \
    --set checkpoint.dir="$WORK/${arch}_ck" --set train.exit_after=0 > "$WORK/${arch}_save.log" 2>&1 ||
    { cat "$WORK/${arch}_save.log"; fail "$arch: saving the initial state"; }
  "$LOOM" export "$WORK/${arch}_ck/step_00000000" --format hf --output "$WORK/${arch}_export" > /dev/null ||
    fail "$arch: export"
  echo "hf_models.py compare-loss $WORK/$arch $WORK/text.txt $WORK/${arch}_one $WORK/${arch}_tp2ep2pp2 $COMPARE" \
    "--export $WORK/${arch}_export --same-architecture" >> "$CHECK"
done
# A DeepSeek-V3 with n_shared_experts 0, whose shared experts transformers still builds and saves as
# tensors of no rows: read with no warning of unused tensors, exported with them (no missing keys).
U=(--set model.moe.aux_loss_coeff=0.01 --set model.moe.z_loss_coeff=0.001 --set model.num_layers=4
  --set model.init_from="$WORK/deepseek_v3_unshared")
"$LOOM" train "$TINY" --run-dir "$WORK/unshared_one" "${BASE[@]}" "${ONE_STEP[@]}" "${U[@]}" \
  > "$WORK/unshared_one.log" 2>&1 || { cat "$WORK/unshared_one.log"; fail "unshared"; }
grep -q "not used" "$WORK/unshared_one.log" && { cat "$WORK/unshared_one.log"; fail "unshared: tensors said unused"; }
"$LOOM" train "$TINY" --run-dir "$WORK/unshared_save" "${BASE[@]}" "${U[@]}" --set checkpoint.dir="$WORK/unshared_ck" \
  --set train.exit_after=0 > "$WORK/unshared_save.log" 2>&1 || { cat "$WORK/unshared_save.log"; fail "unshared: save"; }
"$LOOM" export "$WORK/unshared_ck/step_00000000" --format hf --output "$WORK/unshared_export" > /dev/null ||
  fail "unshared: export"
echo "hf_models.py compare-loss $WORK/deepseek_v3_unshared $WORK/text.txt $WORK/unshared_one $COMPARE" \
  "--export $WORK/unshared_export --same-architecture" >> "$CHECK"
# DeepSeek-V3's multi-token prediction (model.mtp.depth 2, its modules drawn by loom on top of the
# directory, which has none): step 1's mtp_loss equals the one transformers' own DeepSeek-V3 layers
# compute from loom's export (tests/reference/deepseek_mtp.py: the modules as layers 4 and 5 in the
# release's names, their only unexpected keys), in one process and at tp 2 x ep 2 x pp 2 + SP; the
# export read back (model.init_from) starts from the same modules: the same first losses.
MTP_RUN=(--set model.moe.aux_loss_coeff=0.01 --set model.moe.z_loss_coeff=0.001 --set model.num_layers=4
  --set model.mtp.depth=2)
"$LOOM" train "$TINY" --run-dir "$WORK/mtp_one" "${BASE[@]}" "${ONE_STEP[@]}" "${MTP_RUN[@]}" \
  --set model.init_from="$WORK/deepseek_v3" > "$WORK/mtp_one.log" 2>&1 || { cat "$WORK/mtp_one.log"; fail "MTP in one process"; }
"$LOOM" train "$TINY" --run-dir "$WORK/mtp_save" "${BASE[@]}" "${MTP_RUN[@]}" --set model.init_from="$WORK/deepseek_v3" \
  --set checkpoint.dir="$WORK/mtp_ck" --set train.exit_after=0 > "$WORK/mtp_save.log" 2>&1 ||
  { cat "$WORK/mtp_save.log"; fail "MTP: saving the initial state"; }
"$LOOM" export "$WORK/mtp_ck/step_00000000" --format hf --output "$WORK/mtp_export" > /dev/null || fail "MTP: export"
mpirun --oversubscribe -np 8 "$LOOM" train "$TINY" --run-dir "$WORK/mtp_read_tp2ep2pp2" "${BASE[@]}" "${ONE_STEP[@]}" \
  "${MTP_RUN[@]}" --set parallel.tp=2 --set parallel.ep=2 --set parallel.pp=2 --set parallel.sequence_parallel=true \
  --set model.init_from="$WORK/mtp_export" > "$WORK/mtp_read.log" 2>&1 || { cat "$WORK/mtp_read.log"; fail "MTP read back"; }
echo "deepseek_mtp.py $WORK/mtp_export $WORK/text.txt $WORK/mtp_one $WORK/mtp_read_tp2ep2pp2 $COMPARE" >> "$CHECK"

cp -r "$WORK/mixtral" "$WORK/mixtral_sw"
python3 -c 'import json, sys; f = sys.argv[1]; j = json.load(open(f)); j["sliding_window"] = 16; json.dump(j, open(f, "w"))' \
  "$WORK/mixtral_sw/config.json"
expect_exit 2 "$WORK/mixtral_sw/config.json has layers that attend within a sliding_window of 16 tokens" "$LOOM" train "$TINY" --run-dir "$WORK/mixtral_sw_run" \
  "${BASE[@]}" "${ONE_STEP[@]}" --set model.init_from="$WORK/mixtral_sw"

# config.json forms transformers reads its own way, each of which loom once read differently and
# trained 1e-4 to 4e-3 off: a rope_theta inside 4.x's rope_scaling (transformers takes rope_scaling
# for rope_parameters); a top-level original_max_position_embeddings beside YaRN's own (the top-level
# one wins, 8 over 16); null for norm_topk_prob and rope_interleave (false, as Python's truth value).
# Their first losses are transformers'. rope_scaling beside rope_parameters (transformers 5 would
# drop rope_parameters' theta for the class default) is refused naming it.
edit_config() {  # edit_config SOURCE DEST PYTHON: DEST is SOURCE with PYTHON run on its config.json as j
  cp -r "$WORK/$1" "$WORK/$2"
  python3 -c "import json, sys; f = sys.argv[1]; j = json.load(open(f)); $3; json.dump(j, open(f, 'w'))" \
    "$WORK/$2/config.json"
}
edit_config qwen3_moe qwen3_moe_v4 'j["rope_scaling"] = j.pop("rope_parameters")'
edit_config deepseek_v3 deepseek_v3_forms \
  'j["original_max_position_embeddings"] = 8; j["norm_topk_prob"] = None; j["rope_interleave"] = None'
# A Mixtral without num_experts_per_tok (transformers' default: 2) whose hidden_act is "swish"
# (transformers' other name for SiLU; loom once refused it).
edit_config mixtral mixtral_top_k 'del j["num_experts_per_tok"]; j["hidden_act"] = "swish"'
# DeepSeek-V3 under llama3 scaling with mscale_all_dim, which its attention's softmax scale takes
# under any scaling (loom once read it under YaRN only: 4.3e-3 off); Kimi-K2's YaRN, whose
# beta_fast equals beta_slow (a step for a ramp; loom once refused it), in 4.x's rope_scaling; a
# Qwen2 with use_sliding_window whose max_window_layers covers every layer (none slides).
edit_config deepseek_v3 deepseek_v3_llama3 'j["rope_parameters"] = {"rope_type": "llama3", "rope_theta": 20000.0,
  "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 16,
  "mscale_all_dim": 1.0}'
edit_config deepseek_v3 deepseek_v3_kimi 'j.pop("rope_parameters"); j["rope_theta"] = 50000.0; j["rope_scaling"] = {
  "type": "yarn", "factor": 32.0, "beta_fast": 1.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0,
  "original_max_position_embeddings": 16}'
edit_config qwen2 qwen2_window \
  'j.pop("layer_types"); j["use_sliding_window"] = True; j["sliding_window"] = 8; j["max_window_layers"] = 2'
for arch in qwen3_moe_v4 deepseek_v3_forms mixtral_top_k deepseek_v3_llama3 deepseek_v3_kimi qwen2_window; do
  FORMS_RUN=(--set model.moe.aux_loss_coeff=0.01 --set model.moe.z_loss_coeff=0.001)
  case "$arch" in deepseek_v3_*) FORMS_RUN+=(--set model.num_layers=4) ;; qwen2_*) FORMS_RUN=() ;; esac
  "$LOOM" train "$TINY" --run-dir "$WORK/${arch}_one" "${BASE[@]}" "${ONE_STEP[@]}" "${FORMS_RUN[@]}" \
    --set model.init_from="$WORK/$arch" > "$WORK/${arch}_one.log" 2>&1 || { cat "$WORK/${arch}_one.log"; fail "$arch"; }
  echo "hf_models.py compare-loss $WORK/$arch $WORK/text.txt $WORK/${arch}_one $COMPARE" >> "$CHECK"
done
edit_config qwen3_moe qwen3_moe_both 'j["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0}'
expect_exit 2 "$WORK/qwen3_moe_both/config.json: \"rope_scaling\" is given beside rope_parameters" "$LOOM" train "$TINY" \
  --run-dir "$WORK/qwen3_moe_both_run" "${BASE[@]}" "${ONE_STEP[@]}" --set model.init_from="$WORK/qwen3_moe_both"
edit_config qwen3_moe qwen3_moe_bias 'j["attention_bias"] = True'
expect_exit 2 "$WORK/qwen3_moe_bias/config.json: \"attention_bias\" is true" "$LOOM" train "$TINY" \
  --run-dir "$WORK/qwen3_moe_bias_run" "${BASE[@]}" "${ONE_STEP[@]}" --set model.init_from="$WORK/qwen3_moe_bias"

# configs/finetune_hf.yaml, as the README's fine-tuning section runs it: the model keys all from
# config.json, its first loss transformers'. A config written for another model is refused naming
# every key that differs, not only the first.
"$LOOM" train "$LOOM_SOURCE/configs/finetune_hf.yaml" --run-dir "$WORK/finetune" --set model.init_from="$WORK/llama" \
  --set data.path="$WORK/ds" --set data.order=sequential --set model.seq_len=32 --set train.global_batch_size=8 \
  --set train.micro_batch_size=8 --set train.steps=2 --set train.warmup_steps=0 --set checkpoint.dir="$WORK/finetune_ck" \
  > "$WORK/finetune.log" 2>&1 || { cat "$WORK/finetune.log"; fail "configs/finetune_hf.yaml"; }
echo "hf_models.py compare-loss $WORK/llama $WORK/text.txt $WORK/finetune $COMPARE" >> "$CHECK"
code=0
"$LOOM" train "$TINY" --run-dir "$WORK/conflicts" --set model.init_from="$WORK/llama" > "$WORK/conflicts.log" 2>&1 ||
  code=$?
[ "$code" = 2 ] && grep -q "model.hidden_size is 32 in $TINY but $WORK/llama/config.json says 64" "$WORK/conflicts.log" &&
  grep -q "model.vocab_size is 64 in $TINY but $WORK/llama/config.json says 256" "$WORK/conflicts.log" &&
  grep -q "configs/finetune_hf.yaml sets none" "$WORK/conflicts.log" ||
  { cat "$WORK/conflicts.log"; fail "init_from's conflicts should all be named at once (exit $code)"; }

# An explicit family: the Mistral as LlamaForCausalLM, its fields still kept.
"$LOOM" export "$WORK/mistral_ck/step_00000000" --format hf-llama --output "$WORK/mistral_as_llama" > /dev/null ||
  fail "mistral: export as hf-llama"
grep -q '"LlamaForCausalLM"' "$WORK/mistral_as_llama/config.json" || fail "--format hf-llama should write LlamaForCausalLM"
echo "hf_models.py compare-loss $WORK/mistral $WORK/text.txt $COMPARE --export $WORK/mistral_as_llama" >> "$CHECK"
# A hand-changed reference field fails the check (a `!` line: batch.py expects it to fail).
cp -r "$WORK/llama_export" "$WORK/llama_export_changed"
python3 -c 'import json, sys; f = sys.argv[1]; j = json.load(open(f)); j["max_position_embeddings"] = 32; json.dump(j, open(f, "w"))' \
  "$WORK/llama_export_changed/config.json"
echo "!hf_models.py compare-loss $WORK/llama $WORK/text.txt $COMPARE --export $WORK/llama_export_changed" >> "$CHECK"
# A hand-changed reference: a loss compared against another model's run fails.
echo "!hf_models.py compare-loss $WORK/qwen2 $WORK/text.txt $WORK/llama_one $COMPARE" >> "$CHECK"

# Greedy generation (temperature 0; loom samples at 1 by default, transformers is greedy): loom's ids
# equal transformers' generate, compared after phase 3.
GREEDY=(gpt2 llama mixtral qwen3_moe deepseek_v3)
PROMPT="Tensor parallelism splits"
dirs=()
for arch in "${GREEDY[@]}"; do dirs+=("$WORK/$arch"); done
echo "hf_models.py greedy ${dirs[*]} --prompt '$PROMPT' --max-new-tokens 12 --out $WORK/hf_greedy.txt" >> "$CHECK"
for arch in "${GREEDY[@]}"; do
  "$LOOM" generate "$WORK/$arch" --prompt "$PROMPT" --max-new-tokens 12 --temperature 0 --ids \
    > "$WORK/${arch}_gen.txt" 2> "$WORK/${arch}_gen.log" || { cat "$WORK/${arch}_gen.log"; fail "$arch: loom generate"; }
  # The MoEs also from loom's checkpoint of them (the router's settings from its manifest): its 32
  # positions (the trained seq_len) hold the 25-token prompt and the first 7 of transformers' ids.
  case "$arch" in mixtral | qwen3_moe | deepseek_v3)
    "$LOOM" generate "$WORK/${arch}_ck/step_00000000" --prompt "$PROMPT" --max-new-tokens 7 \
      --temperature 0 --ids > "$WORK/${arch}_ck_gen.txt" 2> "$WORK/${arch}_ck_gen.log" ||
      { cat "$WORK/${arch}_ck_gen.log"; fail "$arch: loom generate from the checkpoint"; } ;;
  esac
done

# Mistral with a sliding window shorter than the sequence: refused, naming the key; generate holds
# the prompt and the new tokens within the window.
expect_exit 2 "sliding_window" "$LOOM" train "$TINY" --run-dir "$WORK/sw" "${BASE[@]}" "${ONE_STEP[@]}" \
  --set model.init_from="$WORK/mistral_sw"
expect_exit 2 "the model's 32 positions (sliding_window)" "$LOOM" generate "$WORK/mistral_sw32" --prompt "$PROMPT" \
  --max-new-tokens 12
# Every tensor transformers saved, and every tensor of loom's exports (MTP layers' embedding and
# head copies among them), is part of the model loom built from it: none is called unused.
unused=$(grep -l "are not part of the model" "$WORK"/*.log || true)
[ -z "$unused" ] || { cat $unused; fail "tensors called unused in: $unused"; }

# Phase 3: every reference check at once.
"$PY" "$REF/batch.py" "$CHECK" || fail "a check against transformers (above)"
line=0
for arch in "${GREEDY[@]}"; do
  line=$((line + 1))
  hf_ids=$(sed -n "${line}p" "$WORK/hf_greedy.txt" | tr -d ' ')
  loom_ids=$(tail -1 "$WORK/${arch}_gen.txt" | tr -d ' ')
  [ -n "$hf_ids" ] && [ "$loom_ids" = "$hf_ids" ] || fail "$arch: loom generate gave $loom_ids, transformers $hf_ids"
  case "$arch" in mixtral | qwen3_moe | deepseek_v3)
    ck_ids=$(tail -1 "$WORK/${arch}_ck_gen.txt" | tr -d ' ')
    hf_first=$(python3 -c 'import json, sys; print(json.dumps(json.loads(sys.argv[1])[:7]).replace(" ", ""))' "$hf_ids")
    [ "$ck_ids" = "$hf_first" ] || fail "$arch: loom generate from the checkpoint gave $ck_ids, transformers $hf_first" ;;
  esac
done
echo "transformers reference: ok"
