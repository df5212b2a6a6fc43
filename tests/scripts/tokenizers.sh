#!/usr/bin/env bash
# loom's tokenizers against reference ones, document by document, through `loom prepare`
# (the dataset is read back and compared with the reference's ids): SentencePiece models
# (bpe and unigram) trained here and encoded by python3-sentencepiece; byte-level BPE
# tokenizer.json files learned here (GPT-2, Llama 3 and SmolLM shapes) encoded by
# Tokenizers.js; GPT-2's and cl100k's real ranks encoded by js-tiktoken. The texts
# (tests/reference/texts.jsonl) hold accents, CJK, emoji, runs of whitespace, special
# tokens, contractions, digits and an empty document.
source "$(dirname "$0")/common.sh"
REF="$LOOM_SOURCE/tests/reference"
TEXTS="$REF/texts.jsonl"
PY=/usr/bin/python3  # Debian's, with python3-sentencepiece
[ -d "$REF/node_modules/@huggingface/tokenizers" ] && [ -d "$REF/node_modules/js-tiktoken" ] ||
  fail "the reference tokenizers are not installed: run scripts/setup.sh (npm ci in tests/reference)"

# check NAME TOKENIZER REFERENCE_IDS: loom's ids for TEXTS equal REFERENCE_IDS.
check() {
  "$LOOM" prepare --tokenizer "$2" --input "$TEXTS" --output "$WORK/$1" > "$WORK/$1.log" 2>&1 ||
    { cat "$WORK/$1.log"; fail "loom prepare with $1"; }
  "$PY" "$REF/compare_ids.py" "$WORK/$1" "$3" "$1" || fail "$1: loom's ids differ from the reference's"
}

# Training text: the texts themselves and the README (English, code, tables).
{ "$PY" -c 'import json,sys; [print(json.loads(l)["text"]) for l in open(sys.argv[1])]' "$TEXTS"
  cat "$LOOM_SOURCE/README.md"; } > "$WORK/train.txt"

for type in bpe unigram; do
  "$PY" "$REF/sp_encode.py" train "$WORK/train.txt" "$WORK/sp_$type" "$type" 400
  "$PY" "$REF/sp_encode.py" encode "$WORK/sp_$type.model" "$TEXTS" > "$WORK/sp_$type.ref"
  check "sentencepiece_$type" "$WORK/sp_$type.model" "$WORK/sp_$type.ref"
done

"$PY" "$REF/train_bpe.py" "$WORK/train.txt" 400 "$WORK/hf"
for shape in gpt2 llama3 smollm; do
  node "$REF/hf_encode.mjs" "$WORK/hf/$shape" "$TEXTS" > "$WORK/hf_$shape.ref"
  check "hf_$shape" "$WORK/hf/$shape" "$WORK/hf_$shape.ref"
done

for encoding in gpt2 cl100k_base; do
  node "$REF/tiktoken_encode.mjs" "$encoding" export "$WORK/tiktoken_$encoding"
  node "$REF/tiktoken_encode.mjs" "$encoding" encode "$TEXTS" > "$WORK/tiktoken_$encoding.ref"
  check "tiktoken_$encoding" "$WORK/tiktoken_$encoding/tokenizer.json" "$WORK/tiktoken_$encoding.ref"
done
echo "tokenizers: all equal their references"
