#!/usr/bin/env bash
# loom generate against an independent PyTorch forward: a tiny GPT-2 and a tiny Llama (GQA,
# RoPE, untied output), trained on text and exported to Hugging Face directories; the
# reference (reference_forward.py, written from Hugging Face's conventions, recomputing the
# whole sequence every step, no cache) gives the greedy continuation, and loom generate
# --temperature 0 (with its KV cache) gives the same ids from the checkpoint and from the
# Hugging Face directory, as one process and at tp 2 under mpirun (the Llama's 255 tokens padded
# to 256 there: the padding row's logit must never be drawn). The streamed text is the
# ids' bytes. Sampling with a seed repeats (at tp 2 too), another seed at a high temperature
# gives other ids, top-k 1 is greedy; positions beyond the model, pp > 1, a changed model
# key and a missing MODEL are refused with exit 2. Generation stops at generation_config.json's
# end-of-sequence ids (a list), else config.json's.
source "$(dirname "$0")/common.sh"
PY=python3  # the project venv's (first on PATH under ctest)
cat "$LOOM_SOURCE/README.md" "$LOOM_SOURCE/CMakeLists.txt" > "$WORK/text.txt"
"$LOOM" prepare --input "$WORK/text.txt" --output "$WORK/ds" > /dev/null || fail "prepare"
SHAPE=(--set model.num_layers=2 --set model.hidden_size=64 --set model.num_heads=4 --set model.seq_len=32
  --set data.path="$WORK/ds" --set train.steps=200 --set train.global_batch_size=8 --set log.interval=200
  --set train.threads_per_rank=1 --set checkpoint.interval=200)
"$LOOM" train "$LOOM_SOURCE/configs/gpt_tiny.yaml" --run-dir "$WORK/gpt" "${SHAPE[@]}" \
  --set checkpoint.dir="$WORK/ck_gpt" > "$WORK/gpt.log" 2>&1 || { cat "$WORK/gpt.log"; fail "train gpt"; }
"$LOOM" train "$LOOM_SOURCE/configs/llama_tiny.yaml" --run-dir "$WORK/llama" "${SHAPE[@]}" \
  --set model.ffn_hidden_size=128 --set model.vocab_size=255 --set checkpoint.dir="$WORK/ck_llama" \
  > "$WORK/llama.log" 2>&1 ||
  { cat "$WORK/llama.log"; fail "train llama"; }
"$LOOM" export "$WORK/ck_gpt/step_00000200" --format hf-gpt2 --output "$WORK/hf_gpt" > /dev/null || fail "export gpt"
"$LOOM" export "$WORK/ck_llama/step_00000200" --format hf-llama --output "$WORK/hf_llama" > /dev/null ||
  fail "export llama"

PROMPT="The quick brown"  # 15 byte tokens; 15 + 16 new ones fit the 32 positions
N=16

# gen NP NAME MODEL [args...]: loom generate of PROMPT with --ids, stdout in $WORK/NAME.out;
# NP 2 runs under mpirun at parallel.tp=2.
gen() {
  local np="$1" name="$2" model="$3"
  shift 3
  local cmd=("$LOOM" generate "$model" --prompt "$PROMPT" --max-new-tokens "$N" --ids "$@")
  if [ "$np" != 1 ]; then cmd=(mpirun --oversubscribe -np "$np" "${cmd[@]}" --set parallel.tp="$np"); fi
  "${cmd[@]}" > "$WORK/$name.out" 2> "$WORK/$name.err" || { cat "$WORK/$name.err"; fail "generate $name"; }
  # The streamed text is the continuation's bytes, then a newline, then the ids.
  "$PY" - "$WORK/$name.out" <<'PYEOF' || fail "$name: the text on stdout is not the generated ids' bytes"
import json, sys
out = open(sys.argv[1], "rb").read()
ids = json.loads(out.rstrip(b"\n").rsplit(b"\n", 1)[1])
assert out == bytes(ids) + b"\n" + json.dumps(ids, separators=(",", ":")).encode() + b"\n", out
PYEOF
}
ids() { tail -n 1 "$WORK/$1.out"; }

for arch in gpt llama; do
  expected=$("$PY" "$SCRIPTS/reference_forward.py" greedy "$WORK/hf_$arch" --prompt "$PROMPT" --max-new-tokens "$N") ||
    fail "reference $arch"
  [ "$(echo "$expected" | tr -cd ',' | wc -c)" = $((N - 1)) ] || fail "reference $arch gave '$expected'"
  gen 1 "${arch}_ck1" "$WORK/ck_$arch" --temperature 0  # a checkpoint.dir: its latest
  gen 1 "${arch}_hf1" "$WORK/hf_$arch" --temperature 0
  gen 2 "${arch}_ck2" "$WORK/ck_$arch/step_00000200" --temperature 0
  gen 2 "${arch}_hf2" "$WORK/hf_$arch" --temperature 0
  for run in ck1 hf1 ck2 hf2; do
    [ "$(ids "${arch}_$run")" = "$expected" ] ||
      fail "$arch $run: loom generate gave $(ids "${arch}_$run"), the reference's greedy chain $expected"
  done
  echo "$arch: greedy ids equal the reference's at tp 1 and 2, from the checkpoint and the export: $expected"
done

# Generation stops where Hugging Face's generate does: at any id of generation_config.json's
# eos_token_id (a list, as Qwen3's releases give), else of config.json's; the stop id ends the ids.
# Here the greedy chain's third id, then (config.json only) its second.
cp -r "$WORK/hf_llama" "$WORK/hf_eos"
"$PY" - "$WORK/hf_eos" "$(ids llama_hf1)" <<'PYEOF' || fail "writing the stop ids"
import json, os, sys
d, chain = sys.argv[1], json.loads(sys.argv[2])
json.dump({"eos_token_id": [254, chain[2]]}, open(os.path.join(d, "generation_config.json"), "w"))
config = json.load(open(os.path.join(d, "config.json")))
config["eos_token_id"] = chain[1]
json.dump(config, open(os.path.join(d, "config.json"), "w"))
PYEOF
stopped() {
  "$LOOM" generate "$WORK/hf_eos" --prompt "$PROMPT" --max-new-tokens "$N" --ids --temperature 0 > "$WORK/eos.out" \
    2> "$WORK/eos.err" || { cat "$WORK/eos.err"; fail "generate with stop ids"; }
  tail -n 1 "$WORK/eos.out"
}
# The greedy chain up to and including its first id among STOP (a JSON list).
upto() {
  "$PY" -c 'import json, sys; c, s = json.loads(sys.argv[1]), json.loads(sys.argv[2])
n = next(i for i, t in enumerate(c) if t in s)
print(json.dumps(c[:n + 1], separators=(",", ":")))' "$(ids llama_hf1)" "$1"
}
want=$(upto "$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["eos_token_id"])' "$WORK/hf_eos/generation_config.json")")
[ "$(stopped)" = "$want" ] || fail "generation_config.json's stop ids: $(stopped), expected $want"
grep -q "stopped at the end-of-sequence token" "$WORK/eos.err" || { cat "$WORK/eos.err"; fail "the stop was not said"; }
rm "$WORK/hf_eos/generation_config.json"
want=$(upto "[$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["eos_token_id"])' "$WORK/hf_eos/config.json")]")
[ "$(stopped)" = "$want" ] || fail "config.json's stop id: $(stopped), expected $want"
# A Hugging Face model that names no stop id runs on, as generate does: not at the byte tokenizer's
# end-of-sequence id 256 (the directory has no tokenizer), here a token of its vocabulary of 300 that
# the greedy chain reaches (the output row of id 256 made three times that of the chain's fourth id).
cp -r "$WORK/hf_llama" "$WORK/hf_noeos"
"$PY" - "$WORK/hf_noeos" "$(ids llama_hf1)" <<'PYEOF' || fail "writing the model without stop ids"
import json, os, sys
import torch
from safetensors.torch import load_file, save_file
d, chain = sys.argv[1], json.loads(sys.argv[2])
weights = load_file(os.path.join(d, "model.safetensors"))
for name in ("model.embed_tokens.weight", "lm_head.weight"):
    w = weights[name]
    weights[name] = torch.cat([w, torch.zeros(300 - w.shape[0], w.shape[1], dtype=w.dtype)])
weights["lm_head.weight"][256] = 3 * weights["lm_head.weight"][chain[3]]
save_file(weights, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
config = json.load(open(os.path.join(d, "config.json")))
config["vocab_size"], config["eos_token_id"], config["bos_token_id"] = 300, None, 65
json.dump(config, open(os.path.join(d, "config.json"), "w"))
for name in ("generation_config.json", "tokenizer.json", "tokenizer.model"):
    if os.path.exists(os.path.join(d, name)):
        os.remove(os.path.join(d, name))
PYEOF
"$LOOM" generate "$WORK/hf_noeos" --prompt "$PROMPT" --max-new-tokens "$N" --ids --temperature 0 > "$WORK/noeos.out" \
  2> "$WORK/noeos.err" || { cat "$WORK/noeos.err"; fail "generate without stop ids"; }
"$PY" -c 'import json, sys; ids = json.loads(sys.argv[1]); assert len(ids) == int(sys.argv[2]) and 256 in ids, ids' \
  "$(tail -n 1 "$WORK/noeos.out")" "$N" || fail "a model naming no stop id should run to $N ids through 256: $(tail -n 1 "$WORK/noeos.out")"
# An empty prompt starts from the model's bos_token_id (here 65, the byte 'A'), as generate does,
# though the byte tokenizer has no BOS.
"$LOOM" generate "$WORK/hf_noeos" --prompt "" --max-new-tokens 4 --ids --temperature 0 > "$WORK/empty.out" \
  2> "$WORK/empty.err" || { cat "$WORK/empty.err"; fail "generate from an empty prompt"; }
"$LOOM" generate "$WORK/hf_noeos" --prompt "A" --max-new-tokens 4 --ids --temperature 0 > "$WORK/a.out" 2> /dev/null ||
  fail "generate from the prompt A"
[ "$(tail -n 1 "$WORK/empty.out")" = "$(tail -n 1 "$WORK/a.out")" ] ||
  fail "an empty prompt gave $(tail -n 1 "$WORK/empty.out"), the prompt of bos_token_id 65 $(tail -n 1 "$WORK/a.out")"
echo "stop ids: generation_config.json's list, else config.json's; none named: $N ids, 256 among them; an empty prompt starts at bos_token_id"

# An id beyond the tokenizer (here 290 of the vocabulary of 300, where the byte tokenizer knows 257):
# with --ids the text stops there, said on stderr, and the ids run on; without, exit 2 naming it.
cp -r "$WORK/hf_noeos" "$WORK/hf_wide"
"$PY" - "$WORK/hf_wide" "$(ids llama_hf1)" <<'PYEOF' || fail "writing the model with ids beyond the tokenizer"
import json, os, sys
from safetensors.torch import load_file, save_file
d, chain = sys.argv[1], json.loads(sys.argv[2])
weights = load_file(os.path.join(d, "model.safetensors"))
weights["lm_head.weight"][290] = 4 * weights["lm_head.weight"][chain[3]]
save_file(weights, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
PYEOF
"$LOOM" generate "$WORK/hf_wide" --prompt "$PROMPT" --max-new-tokens "$N" --ids --temperature 0 > "$WORK/wide.out" \
  2> "$WORK/wide.err" || { cat "$WORK/wide.err"; fail "generate --ids with an id the tokenizer cannot decode"; }
"$PY" - "$WORK/wide.out" "$N" <<'PYEOF' || fail "--ids beyond the tokenizer: $(cat "$WORK/wide.out")"
import json, sys
out = open(sys.argv[1], "rb").read()
text, line = out.rstrip(b"\n").rsplit(b"\n", 1)
ids = json.loads(line)
assert len(ids) == int(sys.argv[2]) and 290 in ids, ids
assert text == bytes(ids[:ids.index(290)]), (text, ids)  # the text up to the first id it cannot decode
PYEOF
grep -q "generated id 290, which tokenizer 'byte' (257 ids) cannot decode: the text stops there" "$WORK/wide.err" ||
  { cat "$WORK/wide.err"; fail "the cut text was not said"; }
code=0
"$LOOM" generate "$WORK/hf_wide" --prompt "$PROMPT" --max-new-tokens "$N" --temperature 0 > /dev/null \
  2> "$WORK/wide_text.err" || code=$?
[ "$code" = 2 ] && grep -q "generated id 290, which tokenizer 'byte' (257 ids) cannot decode" "$WORK/wide_text.err" ||
  { cat "$WORK/wide_text.err"; fail "text only, an id the tokenizer cannot decode: exit $code"; }
echo "ids beyond the tokenizer: with --ids the text stops at 290 and the ids run on; without, exit 2"

# Sampling repeats with its seed (and at tp 2); at temperature 3 over 256 tokens, 16 draws of two
# seeds agreeing is out of the question; top-k 1 is the greedy chain.
SAMPLE=(--temperature 0.8 --top-k 20 --top-p 0.9)
gen 1 s7a "$WORK/ck_llama" "${SAMPLE[@]}" --seed 7
gen 1 s7b "$WORK/ck_llama" "${SAMPLE[@]}" --seed 7
gen 2 s7tp2 "$WORK/ck_llama" "${SAMPLE[@]}" --seed 7
[ "$(ids s7a)" = "$(ids s7b)" ] || fail "seed 7 gave $(ids s7a), then $(ids s7b)"
[ "$(ids s7a)" = "$(ids s7tp2)" ] || fail "seed 7 gave $(ids s7a) at tp 1, $(ids s7tp2) at tp 2"
gen 1 hot7 "$WORK/ck_llama" --temperature 3 --seed 7
gen 1 hot8 "$WORK/ck_llama" --temperature 3 --seed 8
[ "$(ids hot7)" != "$(ids hot8)" ] || fail "seeds 7 and 8 at temperature 3 gave the same ids $(ids hot7)"
gen 1 top1 "$WORK/ck_llama" --temperature 1 --top-k 1 --seed 3
[ "$(ids top1)" = "$(ids llama_ck1)" ] || fail "top-k 1 gave $(ids top1), greedy $(ids llama_ck1)"
echo "sampling: seed 7 repeats ($(ids s7a)), at tp 2 too; seeds 7 and 8 differ; top-k 1 is greedy"

GEN=("$LOOM" generate "$WORK/ck_llama" --prompt "$PROMPT")
expect_exit 2 "make more than the model's 32 positions (model.seq_len); ask for at most 17" "${GEN[@]}" --max-new-tokens 18
expect_exit 2 "make more than the model's 32 positions; ask for at most 17" "$LOOM" generate "$WORK/hf_gpt" \
  --prompt "$PROMPT" --max-new-tokens 18
expect_exit 2 "--max-new-tokens 9223372036854775807: the prompt's 15 tokens" "${GEN[@]}" --max-new-tokens 9223372036854775807
LONG_PROMPT=$(printf 'x%.0s' $(seq 40))
expect_exit 2 "--prompt: it is 40 tokens, and the model holds 32 positions (model.seq_len) for the prompt and the new tokens together; shorten it to at most 31" \
  "$LOOM" generate "$WORK/ck_llama" --prompt "$LONG_PROMPT" --max-new-tokens 1
expect_exit 2 "--prompt: it is 40 tokens, and the model holds 32 positions for" "$LOOM" generate "$WORK/hf_gpt" \
  --prompt "$LONG_PROMPT" --max-new-tokens 1
expect_exit 2 "loom generate runs at parallel.tp only" "${GEN[@]}" --max-new-tokens 2 --set parallel.pp=2
expect_exit 2 "has model.hidden_size = 64; loom generate runs the model as it was saved" "${GEN[@]}" --max-new-tokens 2 \
  --set model.hidden_size=32
expect_exit 2 "MODEL '$WORK/nowhere' is not a directory" "$LOOM" generate "$WORK/nowhere" --prompt x --max-new-tokens 1
expect_exit 2 "'$WORK' is neither a loom checkpoint" "$LOOM" generate "$WORK" --prompt x --max-new-tokens 1
expect_exit 2 "--top-p must be in (0, 1]" "${GEN[@]}" --max-new-tokens 2 --top-p 0
# The checkpoint remembers its data's tokenizer: a SentencePiece-trained model generates through it
# without --tokenizer; a tokenizer that knows fewer ids, one gone and one changed are refused (exit 2).
cp "$LOOM_SOURCE/tests/reference/tiny_unigram.model" "$WORK/sp.model"
"$LOOM" prepare --input "$WORK/text.txt" --tokenizer "$WORK/sp.model" --output "$WORK/ds_sp" > /dev/null ||
  fail "prepare with SentencePiece"
"$LOOM" train "$LOOM_SOURCE/configs/gpt_tiny.yaml" --run-dir "$WORK/sp" "${SHAPE[@]}" --set data.path="$WORK/ds_sp" \
  --set model.vocab_size=300 --set train.steps=4 --set train.warmup_steps=1 --set checkpoint.interval=4 --set checkpoint.dir="$WORK/ck_sp" \
  > "$WORK/sp.log" 2>&1 || { cat "$WORK/sp.log"; fail "train on SentencePiece ids"; }
"$LOOM" generate "$WORK/ck_sp" --prompt "$PROMPT" --max-new-tokens 4 --temperature 0 > "$WORK/sp_gen.out" \
  2> "$WORK/sp_gen.err" || { cat "$WORK/sp_gen.err"; fail "generate from the SentencePiece checkpoint"; }
grep -q "tokenizer $WORK/sp.model" "$WORK/sp_gen.err" ||
  { cat "$WORK/sp_gen.err"; fail "the checkpoint's tokenizer should be used without --tokenizer"; }
# Its export carries the tokenizer (as tokenizer.model), which generate then finds in the directory.
"$LOOM" export "$WORK/ck_sp/step_00000004" --output "$WORK/ex_sp" > "$WORK/ex_sp.log" 2>&1 ||
  { cat "$WORK/ex_sp.log"; fail "export of the SentencePiece checkpoint"; }
cmp -s "$WORK/sp.model" "$WORK/ex_sp/tokenizer.model" || fail "the export should carry the data's tokenizer"
# transformers reads it as the data was tokenized (AutoTokenizer: SentencePieceBackend, no BOS as
# the data had none, special tokens' text as text), and config.json names the tokenizer's BOS and
# EOS, where transformers would take Llama's or GPT-2's defaults.
PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python "$PY" - "$WORK/ex_sp" "$WORK/sp.model" <<'PYEOF' ||
import json, sys
import sentencepiece
from transformers import AutoTokenizer
hf, sp = AutoTokenizer.from_pretrained(sys.argv[1]), sentencepiece.SentencePieceProcessor(model_file=sys.argv[2])
for text in ["The pipeline", "12 3", "Hello  world\nnew line", " lead", "ünï 😀", "<s> x </s>", ""]:
    assert hf(text)["input_ids"] == sp.encode(text), (text, hf(text)["input_ids"], sp.encode(text))
config = json.load(open(sys.argv[1] + "/config.json"))
assert (config["bos_token_id"], config["eos_token_id"]) == (sp.bos_id(), sp.eos_id()), config
assert (hf.bos_token, hf.eos_token, hf.unk_token) == tuple(map(sp.id_to_piece, (sp.bos_id(), sp.eos_id(), sp.unk_id())))
PYEOF
  fail "transformers should read the exported SentencePiece tokenizer as the data was tokenized"
"$LOOM" generate "$WORK/ex_sp" --prompt "$PROMPT" --max-new-tokens 4 --temperature 0 > "$WORK/ex_gen.out" \
  2> "$WORK/ex_gen.err" || { cat "$WORK/ex_gen.err"; fail "generate from the export"; }
grep -q "tokenizer $WORK/ex_sp/tokenizer.model" "$WORK/ex_gen.err" && cmp -s "$WORK/sp_gen.out" "$WORK/ex_gen.out" ||
  { cat "$WORK/ex_gen.err"; fail "the export should generate what the checkpoint does, through its tokenizer"; }
# The prompt starts as the data's documents did: these had no BOS (prepare without --add-bos), so
# neither the checkpoint's prompt nor its export's (tokenizer_config.json: add_bos_token false)
# starts with one, though the model has a BOS; data made with --add-bos gives prompts that do.
grep -q "prompt tokens (BOS first)" "$WORK/sp_gen.err" "$WORK/ex_gen.err" &&
  fail "a model trained on documents without BOS should get a prompt without BOS"
"$PY" -c "import json,sys; assert json.load(open(sys.argv[1]))['add_bos_token'] is False" \
  "$WORK/ex_sp/tokenizer_config.json" || fail "the export's tokenizer_config.json should say add_bos_token false"
"$LOOM" prepare --input "$WORK/text.txt" --tokenizer "$WORK/sp.model" --output "$WORK/ds_sp_bos" --add-bos > /dev/null ||
  fail "prepare with SentencePiece and --add-bos"
"$LOOM" train "$LOOM_SOURCE/configs/gpt_tiny.yaml" --run-dir "$WORK/sp_bos" "${SHAPE[@]}" --set data.path="$WORK/ds_sp_bos" \
  --set model.vocab_size=300 --set train.steps=2 --set train.warmup_steps=1 --set checkpoint.interval=2 \
  --set checkpoint.dir="$WORK/ck_sp_bos" > "$WORK/sp_bos.log" 2>&1 || { cat "$WORK/sp_bos.log"; fail "train on data with BOS"; }
"$LOOM" generate "$WORK/ck_sp_bos" --prompt "$PROMPT" --max-new-tokens 1 > /dev/null 2> "$WORK/sp_bos_gen.err" &&
  grep -q "prompt tokens (BOS first)" "$WORK/sp_bos_gen.err" ||
  { cat "$WORK/sp_bos_gen.err"; fail "a model trained on documents that start with BOS should get a prompt with BOS"; }
SP_GEN=("$LOOM" generate "$WORK/ck_sp" --prompt "$PROMPT" --max-new-tokens 4)
expect_exit 2 "tokenizer 'byte' knows 257 ids, but $WORK/ck_sp/step_00000004 was trained on data tokenized with 300" \
  "${SP_GEN[@]}" --tokenizer byte
mv "$WORK/sp.model" "$WORK/sp_moved.model"
expect_exit 2 "tokenized by sentencepiece '$WORK/sp.model', which is no longer there; give that tokenizer with --tokenizer" \
  "${SP_GEN[@]}"
"$LOOM" generate "$WORK/ck_sp" --prompt "$PROMPT" --max-new-tokens 4 --tokenizer "$WORK/sp_moved.model" > /dev/null \
  2>&1 || fail "--tokenizer should stand in for a tokenizer that moved"
{ cat "$WORK/sp_moved.model"; printf x; } > "$WORK/sp.model"
expect_exit 2 "which has changed since (its CRC-32C differs)" "${SP_GEN[@]}"
echo "tokenizer: the checkpoint's SentencePiece model used (and exported with it), a smaller, a moved and a changed one refused"
# The tokenizer a dataset names is the file that made it, wherever train runs: prepare records its
# absolute path and CRC-32C (of a relative --tokenizer too), and a train started in another folder
# records that file. An older sidecar's relative path that is not there from here, and a file
# changed since, are said and not recorded (no other tokenizer stands in). Data without a sidecar
# (Megatron-LM's tools) for a Hugging Face model records the model's tokenizer; data tokenized by
# another tokenizer than the model's is said.
mkdir -p "$WORK/rel/sub" "$WORK/elsewhere"
cp "$LOOM_SOURCE/tests/reference/tiny_unigram.model" "$WORK/rel/sub/t.model"
(cd "$WORK/rel" && "$LOOM" prepare --input "$WORK/text.txt" --tokenizer sub/t.model --output "$WORK/ds_rel") \
  > /dev/null || fail "prepare with a relative --tokenizer"
manifest_tokenizer() { "$PY" -c "import json,sys; print(json.load(open(sys.argv[1] + '/manifest.json')).get('tokenizer', {}).get('file', 'none'))" "$1"; }
"$PY" -c "import json,sys; s=json.load(open(sys.argv[1])); assert s['tokenizer_source']==sys.argv[2] and s['tokenizer_crc32c'] > 0, s" \
  "$WORK/ds_rel.json" "$WORK/rel/sub/t.model" || fail "prepare should record the tokenizer's absolute path and CRC-32C"
train_rel() {  # train_rel NAME: one step on ds_rel, started in $WORK/elsewhere
  (cd "$WORK/elsewhere" && "$LOOM" train "$LOOM_SOURCE/configs/gpt_tiny.yaml" --run-dir "$WORK/$1" "${SHAPE[@]}" \
    --set data.path="$WORK/ds_rel" --set model.vocab_size=300 --set train.steps=1 --set train.warmup_steps=0 \
    --set checkpoint.interval=1 --set checkpoint.dir="$WORK/ck_$1") > "$WORK/$1.log" 2>&1 ||
    { cat "$WORK/$1.log"; fail "train $1"; }
}
train_rel rel_abs
[ "$(manifest_tokenizer "$WORK/ck_rel_abs/step_00000001")" = "$WORK/rel/sub/t.model" ] ||
  fail "a train started elsewhere should record the tokenizer that made the data"
cp "$WORK/ds_rel.json" "$WORK/ds_rel.json.new"
"$PY" -c "import json,sys; s=json.load(open(sys.argv[1])); s['tokenizer_source']='sub/t.model'; del s['tokenizer_crc32c']; json.dump(s, open(sys.argv[1], 'w'))" \
  "$WORK/ds_rel.json"
train_rel rel_old
grep -q "the sentencepiece tokenizer that made this data, 'sub/t.model' (a relative path, .*), is not there" "$WORK/rel_old.log" &&
  [ "$(manifest_tokenizer "$WORK/ck_rel_old/step_00000001")" = none ] ||
  { cat "$WORK/rel_old.log"; fail "an older sidecar's relative tokenizer path not found from here should be said"; }
mv "$WORK/ds_rel.json.new" "$WORK/ds_rel.json"
printf x >> "$WORK/rel/sub/t.model"
train_rel rel_changed
grep -q "is another file now (its CRC-32C differs from the one loom prepare recorded)" "$WORK/rel_changed.log" &&
  [ "$(manifest_tokenizer "$WORK/ck_rel_changed/step_00000001")" = none ] ||
  { cat "$WORK/rel_changed.log"; fail "a tokenizer changed since prepare should be said and not recorded"; }
cp -r "$WORK/hf_llama" "$WORK/hf_llama_tok"
cp "$LOOM_SOURCE/tests/reference/tiny_unigram.model" "$WORK/hf_llama_tok/tokenizer.model"
cp "$WORK/ds.bin" "$WORK/ds_megatron.bin" && cp "$WORK/ds.idx" "$WORK/ds_megatron.idx"
FINETUNE=("$LOOM" train "$LOOM_SOURCE/configs/finetune_hf.yaml" --set model.init_from="$WORK/hf_llama_tok"
  --set model.seq_len=32 --set train.global_batch_size=8 --set train.steps=1 --set train.warmup_steps=0
  --set checkpoint.interval=1 --set train.threads_per_rank=1)
"${FINETUNE[@]}" --run-dir "$WORK/ft_megatron" --set data.path="$WORK/ds_megatron" --set checkpoint.dir="$WORK/ck_ft_megatron" \
  > "$WORK/ft_megatron.log" 2>&1 || { cat "$WORK/ft_megatron.log"; fail "fine-tune on data without a sidecar"; }
[ "$(manifest_tokenizer "$WORK/ck_ft_megatron/step_00000001")" = "$WORK/hf_llama_tok/tokenizer.model" ] ||
  fail "data without a sidecar should record model.init_from's tokenizer"
"${FINETUNE[@]}" --run-dir "$WORK/ft_bytes" --set data.path="$WORK/ds" --set checkpoint.dir="$WORK/ck_ft_bytes" \
  > "$WORK/ft_bytes.log" 2>&1 || { cat "$WORK/ft_bytes.log"; fail "fine-tune on byte-tokenized data"; }
grep -q "was tokenized by the byte tokenizer, and model.init_from's tokenizer is another file, '$WORK/hf_llama_tok/tokenizer.model'" "$WORK/ft_bytes.log" ||
  { cat "$WORK/ft_bytes.log"; fail "data tokenized by another tokenizer than the model's should be said"; }
# A tokenizer.json without a tokenizer_config.json beside it (GPT-2's) goes out with one naming its
# BOS and EOS, and config.json names their ids (GPT-2's 50256, here from the data's tokenizer).
mkdir -p "$WORK/gpt2_bare" && cp "$LOOM_SOURCE/tests/data/tokenizers/gpt2/tokenizer.json" "$WORK/gpt2_bare/"
"$LOOM" prepare --input "$WORK/text.txt" --tokenizer "$WORK/gpt2_bare" --output "$WORK/ds_gpt2" --append-eod > /dev/null ||
  fail "prepare with GPT-2's tokenizer"
gpt2_export() {  # gpt2_export DATASET EXPORT: one step of a GPT on GPT-2's vocabulary, exported
  "$LOOM" train "$LOOM_SOURCE/configs/gpt_tiny.yaml" --run-dir "$WORK/$2_run" "${SHAPE[@]}" --set data.path="$WORK/$1" \
    --set model.vocab_size=50257 --set model.hidden_size=32 --set train.steps=1 --set train.warmup_steps=0 \
    --set checkpoint.interval=1 --set checkpoint.dir="$WORK/$2_ck" > "$WORK/$2_run.log" 2>&1 ||
    { cat "$WORK/$2_run.log"; fail "train on $1"; }
  "$LOOM" export "$WORK/$2_ck/step_00000001" --output "$WORK/$2" > /dev/null || fail "export of $2"
}
gpt2_export ds_gpt2 ex_gpt2
"$PY" - "$WORK/ex_gpt2" "$LOOM_SOURCE/tests/data/tokenizers/gpt2/tokenizer.json" <<'PYEOF' ||
import json, sys
import tokenizers
from transformers import AutoTokenizer
hf, ref = AutoTokenizer.from_pretrained(sys.argv[1]), tokenizers.Tokenizer.from_file(sys.argv[2])
assert hf("Hello world <|endoftext|>")["input_ids"] == ref.encode("Hello world <|endoftext|>").ids
assert hf.eos_token == "<|endoftext|>", hf.eos_token
assert json.load(open(sys.argv[1] + "/tokenizer_config.json"))["eos_token"] == "<|endoftext|>"
config, generation = (json.load(open(f"{sys.argv[1]}/{name}")) for name in ("config.json", "generation_config.json"))
assert config["eos_token_id"] == generation["eos_token_id"] == 50256, (config, generation)
PYEOF
  fail "the exported tokenizer.json should name its EOS for transformers, and config.json its id"
# Data prepared with --add-bos through a tokenizer.json whose post-processor adds none (GPT-2's): the
# export's tokenizer.json puts BOS first (its post-processor), for transformers and loom generate DIR.
"$LOOM" prepare --input "$WORK/text.txt" --tokenizer "$LOOM_SOURCE/tests/data/tokenizers/gpt2" --output "$WORK/ds_gpt2_bos" --add-bos \
  > /dev/null || fail "prepare with GPT-2's tokenizer and --add-bos"
gpt2_export ds_gpt2_bos ex_gpt2_bos
"$PY" - "$WORK/ex_gpt2_bos" "$LOOM_SOURCE/tests/data/tokenizers/gpt2/tokenizer.json" <<'PYEOF' ||
import sys
import tokenizers
from transformers import AutoTokenizer
hf, ref = AutoTokenizer.from_pretrained(sys.argv[1]), tokenizers.Tokenizer.from_file(sys.argv[2])
assert hf("Hello world")["input_ids"] == [50256] + ref.encode("Hello world").ids, hf("Hello world")["input_ids"]
PYEOF
  fail "the export of data with BOS should start transformers' encodings with BOS"
"$LOOM" generate "$WORK/ex_gpt2_bos" --prompt "Hello world" --max-new-tokens 1 > /dev/null 2> "$WORK/ex_gpt2_bos.err" &&
  grep -q "prompt tokens (BOS first)" "$WORK/ex_gpt2_bos.err" ||
  { cat "$WORK/ex_gpt2_bos.err"; fail "loom generate of the export should start the prompt with BOS"; }
echo "tokenizer record: an absolute path from prepare, an old relative one and a changed file said, a model's for sidecar-less data, a mismatch said"

# A checkpoint.dir whose 'latest' names a checkpoint gone since: its newest, said.
cp -r "$WORK/ck_gpt" "$WORK/ck_gpt_moved" && echo step_00000300 > "$WORK/ck_gpt_moved/latest"
"$LOOM" generate "$WORK/ck_gpt_moved" --prompt "$PROMPT" --max-new-tokens 1 > /dev/null 2> "$WORK/moved.err" ||
  { cat "$WORK/moved.err"; fail "generate from a checkpoint.dir whose latest is gone"; }
grep -q "its 'latest' names 'step_00000300', which is not one of its checkpoints: generating from .*step_00000200" \
  "$WORK/moved.err" || { cat "$WORK/moved.err"; fail "a latest that names no checkpoint should be said"; }

echo "generate: ok"
