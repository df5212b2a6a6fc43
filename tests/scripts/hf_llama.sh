#!/usr/bin/env bash
# Hugging Face Llama in and out: a tiny Llama (4 heads, 2 kv heads, untied output) trained at
# tp=2 pp=2 and exported with `loom export --format hf-llama` is a valid model directory
# (parsed here independently of loom's writer); a plain PyTorch Llama forward written from
# Hugging Face's conventions, fed that directory, gives loom's first loss from model.init_from;
# export -> init_from (at tp=2 pp=1) -> export is byte-identical; a sharded export holds the
# same tensors with an index; what loom cannot or must not read is refused with exit 2, named,
# and so is resuming the Llama's checkpoint as a GPT-2; a tensor the config does not describe is
# named as unused, and none of an export's is.
source "$(dirname "$0")/common.sh"
PY=python3  # the project venv's (first on PATH under ctest)
cat "$LOOM_SOURCE/README.md" "$LOOM_SOURCE/CMakeLists.txt" > "$WORK/text.txt"
"$LOOM" prepare --input "$WORK/text.txt" --output "$WORK/ds" > /dev/null || fail "prepare"
SHAPE=(--set model.num_layers=2 --set model.hidden_size=64 --set model.num_heads=4 --set model.vocab_size=256)
BASE=("${SHAPE[@]}" --set data.path="$WORK/ds" --set model.dropout=0)
LLAMA=(--set model.arch=llama --set model.num_kv_heads=2 --set model.ffn_hidden_size=128 --set model.tie_embeddings=false)

mpirun --oversubscribe -np 4 "$LOOM" train "$TINY" --run-dir "$WORK/a" "${BASE[@]}" "${LLAMA[@]}" \
  --set parallel.tp=2 --set parallel.pp=2 --set checkpoint.dir="$WORK/ck_a" --set train.exit_after=5 \
  > "$WORK/a.log" 2>&1 || { cat "$WORK/a.log"; fail "run a"; }
"$LOOM" export "$WORK/ck_a/step_00000005" --format hf-llama --output "$WORK/hf_a" > /dev/null || fail "export a"
"$LOOM" export "$WORK/ck_a/step_00000005" --format hf-llama --output "$WORK/hf_sharded" --max-shard-size 40KB \
  > /dev/null || fail "export a sharded"

# From a's export at tp=2 pp=1, the architecture from its config.json: the initial state saved
# (exit_after 0) and exported again.
mpirun --oversubscribe -np 2 "$LOOM" train "$TINY" --run-dir "$WORK/b" "${BASE[@]}" --set parallel.tp=2 \
  --set model.init_from="$WORK/hf_a" --set checkpoint.dir="$WORK/ck_b" --set train.exit_after=0 \
  > "$WORK/b.log" 2>&1 || { cat "$WORK/b.log"; fail "run b"; }
"$LOOM" export "$WORK/ck_b/step_00000000" --format hf-llama --output "$WORK/hf_b" > /dev/null || fail "export b"

# One step from the sharded export at tp=2 pp=2: its loss is the first batch's under a's weights.
mpirun --oversubscribe -np 4 "$LOOM" train "$TINY" --run-dir "$WORK/c" "${BASE[@]}" --set parallel.tp=2 \
  --set parallel.pp=2 --set model.init_from="$WORK/hf_sharded" --set train.steps=1 --set train.warmup_steps=0 \
  > "$WORK/c.log" 2>&1 || { cat "$WORK/c.log"; fail "run c"; }
# Every tensor of the directory was read by some rank, at tp 2 and at tp 2 x pp 2 from shards.
! grep -q "are not part of the model" "$WORK/b.log" "$WORK/c.log" || fail "a tensor of the export was called unused"
# A tensor the config does not describe (a q_proj bias under "attention_bias": false) is named, as
# transformers lists an unexpected key.
cp -r "$WORK/hf_a" "$WORK/hf_extra"
"$PY" - "$WORK/hf_extra/model.safetensors" <<'PYEOF' || fail "adding a tensor"
import sys, torch
from safetensors.torch import load_file, save_file
tensors = load_file(sys.argv[1])
tensors["model.layers.1.self_attn.q_proj.bias"] = torch.zeros(64)
save_file(tensors, sys.argv[1], metadata={"format": "pt"})
PYEOF
"$LOOM" train "$TINY" --run-dir "$WORK/extra" "${BASE[@]}" --set model.init_from="$WORK/hf_extra" --set train.steps=1 \
  --set train.warmup_steps=0 > "$WORK/extra.log" 2>&1 || { cat "$WORK/extra.log"; fail "run extra"; }
grep -q "1 tensor(s) of '$WORK/hf_extra' are not part of the model its config.json describes, and are not used: model.layers.1.self_attn.q_proj.bias" \
  "$WORK/extra.log" || { cat "$WORK/extra.log"; fail "the tensor config.json does not describe was not named"; }

# The same from a copy with q_proj and k_proj x 8: attention sharp enough that pairing RoPE's
# features (2i, 2i+1) instead of rotating halves, or grouping query heads on kv heads round robin,
# moves the reference loss 12 and 400 times the tolerance (measured; without the x 8, the pairing
# stays inside it).
cp -r "$WORK/hf_a" "$WORK/hf_sharp"
"$PY" "$SCRIPTS/checks.py" hf-scale-qk "$WORK/hf_sharp" 8
"$LOOM" train "$TINY" --run-dir "$WORK/d" "${BASE[@]}" --set model.init_from="$WORK/hf_sharp" --set train.steps=1 \
  --set train.warmup_steps=0 > "$WORK/d.log" 2>&1 || { cat "$WORK/d.log"; fail "run d"; }

"$PY" "$SCRIPTS/checks.py" hf-llama-layout "$WORK/hf_a" "$WORK/hf_b" "$WORK/hf_sharded" --layers 2 --hidden 64 --heads 4 \
  --kv-heads 2 --ffn 128 --vocab 256 || fail "Hugging Face Llama directory check"
"$PY" "$SCRIPTS/checks.py" hf-llama-loss "$WORK/hf_a" "$WORK/text.txt" "$WORK/c" --seq-len 32 --sequences 8 ||
  fail "the Hugging Face-convention Llama forward of the export differs from loom's first loss"
"$PY" "$SCRIPTS/checks.py" hf-llama-loss "$WORK/hf_sharp" "$WORK/text.txt" "$WORK/d" --seq-len 32 --sequences 8 ||
  fail "the Hugging Face-convention Llama forward differs from loom's first loss with sharp attention"

ONE=("$LOOM" train "$TINY" --run-dir "$WORK/err" --set train.steps=1 --set train.warmup_steps=0 "${BASE[@]}")
# tiny.yaml's hidden_size (32) against config.json's (64), and an override against it.
expect_exit 2 "model.hidden_size is 32 in $TINY but $WORK/hf_a/config.json says 64" \
  "$LOOM" train "$TINY" --set model.init_from="$WORK/hf_a"
expect_exit 2 "model.num_kv_heads is 4 by --set but $WORK/hf_a/config.json says 2" \
  "${ONE[@]}" --set model.init_from="$WORK/hf_a" --set model.num_kv_heads=4
edit_json() {  # edit_json FILE STATEMENT: runs the Python STATEMENT on j, FILE's JSON, and writes j back
  "$PY" -c 'import json, sys; j = json.load(open(sys.argv[1])); exec(sys.argv[2]); json.dump(j, open(sys.argv[1], "w"))' "$1" "$2"
}
cp -r "$WORK/hf_sharded" "$WORK/missing"
edit_json "$WORK/missing/model.safetensors.index.json" 'del j["weight_map"]["model.layers.1.mlp.up_proj.weight"]'
expect_exit 2 "'$WORK/missing' has no tensor 'model.layers.1.mlp.up_proj.weight'" "${ONE[@]}" --set model.init_from="$WORK/missing"
cp -r "$WORK/hf_a" "$WORK/misshapen"
edit_json "$WORK/misshapen/config.json" 'j["intermediate_size"] = 64'
expect_exit 2 "_proj.weight' in '$WORK/misshapen/model.safetensors' has shape" \
  "${ONE[@]}" --set model.init_from="$WORK/misshapen"
cp -r "$WORK/hf_a" "$WORK/mistral"
edit_json "$WORK/mistral/config.json" 'j.update(architectures=["MistralForCausalLM"], sliding_window=4096)'
# The class named against model_type's (transformers builds model_type's): refused, not guessed.
expect_exit 2 "$WORK/mistral/config.json: \"architectures\" is MistralForCausalLM but model_type \"llama\" is LlamaForCausalLM" \
  "${ONE[@]}" --set model.init_from="$WORK/mistral"
edit_json "$WORK/mistral/config.json" 'j.update(model_type="mistral")'
edit_json "$WORK/mistral/config.json" 'j.update(sliding_window=16)'
expect_exit 2 "$WORK/mistral/config.json has layers that attend within a sliding_window of 16 tokens" \
  "${ONE[@]}" --set model.init_from="$WORK/mistral"
# hf_a is untied: said tied, its own lm_head.weight would be dropped for the embedding. Refused.
cp -r "$WORK/hf_a" "$WORK/said_tied"
edit_json "$WORK/said_tied/config.json" 'j["tie_word_embeddings"] = True'
expect_exit 2 "'$WORK/said_tied' holds an lm_head.weight other than model.embed_tokens.weight, but its config.json says \"tie_word_embeddings\": true" \
  "${ONE[@]}" --set model.init_from="$WORK/said_tied"
# A GPT-2 config resuming the Llama checkpoint is refused by the architecture.
expect_exit 2 "the checkpoint has model.arch = \"llama\", the config \"gpt2\"" \
  "${ONE[@]}" --set checkpoint.dir="$WORK/ck_a" --resume "$WORK/ck_a/step_00000005"
expect_exit 2 "cannot represent model.norm = rmsnorm: GPT-2 has LayerNorm" \
  "$LOOM" export "$WORK/ck_a/step_00000005" --format hf-gpt2 --output "$WORK/gpt2"
[ -e "$WORK/gpt2" ] && fail "a refused export left $WORK/gpt2 behind"

# Every rank reads model.init_from from its own file system. At dp 2, rank 1 sees hf_sharp where
# hf_a is (a node's local copy that differs, made with a private mount namespace): refused on every
# rank before training, naming both ranks; the same launch where both see hf_a trains.
TWO=("$LOOM" train "$TINY" --run-dir "$WORK/dp2" --set train.steps=1 --set train.warmup_steps=0 "${BASE[@]}"
  --set model.init_from="$WORK/hf_a")
OTHER_COPY=(unshare -m sh -c 'mount --bind "$0" "$1" && shift && exec "$@"' "$WORK/hf_sharp" "$WORK/hf_a")
expect_exit 2 "model.init_from: ranks 0 and 1 read different weights from '$WORK/hf_a'" \
  mpirun --oversubscribe -np 1 "${TWO[@]}" : -np 1 "${OTHER_COPY[@]}" "${TWO[@]}"
[ -e "$WORK/dp2/metrics.jsonl" ] && grep -q '"step"' "$WORK/dp2/metrics.jsonl" && fail "the refused run trained a step"
rm -rf "$WORK/dp2"
SAVE=(--set checkpoint.dir="$WORK/ck_dp2" --set checkpoint.interval=1)
mpirun --oversubscribe -np 1 "${TWO[@]}" "${SAVE[@]}" : -np 1 unshare -m "${TWO[@]}" "${SAVE[@]}" > "$WORK/dp2.log" 2>&1 || { cat "$WORK/dp2.log"; fail "dp 2 from one copy of hf_a"; }
# Resumed, the checkpoint replaces the weights: a copy refreshed since on one node is no reason to refuse.
mpirun --oversubscribe -np 1 "${TWO[@]}" --set checkpoint.dir="$WORK/ck_dp2" --set train.steps=2 --resume auto : \
  -np 1 "${OTHER_COPY[@]}" "${TWO[@]}" --set checkpoint.dir="$WORK/ck_dp2" --set train.steps=2 --resume auto \
  > "$WORK/dp2.log" 2>&1 || { cat "$WORK/dp2.log"; fail "a resume refused for another copy of init_from"; }
grep -q "resumed from .*step_00000001" "$WORK/dp2.log" || { cat "$WORK/dp2.log"; fail "dp 2 did not resume"; }
# A rank that cannot load its copy at all (truncated) ends the job on every rank at once, exit 2,
# not after parallel.timeout_s in the others' next collective.
cp -r "$WORK/hf_a" "$WORK/hf_cut"
truncate -s 2000 "$WORK/hf_cut/model.safetensors"
rm -rf "$WORK/dp2"
OTHER_COPY[5]="$WORK/hf_cut"
expect_exit 2 "model.init_from: rank 1 could not load '$WORK/hf_a'" timeout 120 \
  mpirun --oversubscribe -np 1 "${TWO[@]}" : -np 1 "${OTHER_COPY[@]}" "${TWO[@]}"

# The directory a run started from, deleted before its resume: the resume still reads the model's
# shape from it, so it exits 2 saying how to write it again from the checkpoint; from that export
# the run goes on with the uninterrupted run's losses.
cp -r "$WORK/hf_a" "$WORK/hf_gone"
FOUR=("$LOOM" train "$TINY" "${BASE[@]}" --set train.steps=4 --set train.warmup_steps=1)
"${FOUR[@]}" --run-dir "$WORK/gone_straight" --set model.init_from="$WORK/hf_a" > "$WORK/gone.log" 2>&1 ||
  { cat "$WORK/gone.log"; fail "4 steps from hf_a"; }
"${FOUR[@]}" --run-dir "$WORK/gone" --set model.init_from="$WORK/hf_gone" --set checkpoint.dir="$WORK/ck_gone" --set checkpoint.interval=2 \
  --set train.exit_after=2 > "$WORK/gone.log" 2>&1 || { cat "$WORK/gone.log"; fail "2 steps from hf_gone"; }
rm -rf "$WORK/hf_gone"
expect_exit 2 "point model.init_from at \`loom export CHECKPOINT --format hf --output DIR\`" "${FOUR[@]}" \
  --run-dir "$WORK/gone" --set model.init_from="$WORK/hf_gone" --set checkpoint.dir="$WORK/ck_gone" --resume auto
"$LOOM" export "$WORK/ck_gone/step_00000002" --format hf --output "$WORK/hf_again" > /dev/null || fail "export ck_gone"
"${FOUR[@]}" --run-dir "$WORK/gone_resumed" --set model.init_from="$WORK/hf_again" --set checkpoint.dir="$WORK/ck_gone" --set checkpoint.interval=2 \
  --resume auto > "$WORK/gone.log" 2>&1 || { cat "$WORK/gone.log"; fail "the resume from the checkpoint's export"; }
compare_resumed "$WORK/gone_resumed" "$WORK/gone_straight" 3 4 "resumed with init_from written again by export" ||
  fail "the resume from the checkpoint's export differs"
echo "hf llama: ok"
