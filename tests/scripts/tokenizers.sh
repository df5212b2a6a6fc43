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

# check NAME TOKENIZER REFERENCE_IDS DOCS: loom's ids for DOCS equal REFERENCE_IDS.
check() {
  "$LOOM" prepare --tokenizer "$2" --input "$4" --output "$WORK/$1" > "$WORK/$1.log" 2>&1 ||
    { cat "$WORK/$1.log"; fail "loom prepare with $1"; }
  "$PY" "$REF/compare_ids.py" "$WORK/$1" "$3" "$1" || fail "$1: loom's ids differ from the reference's"
}

# reference NAME TOKENIZER COMMAND...: COMMAND DOCS prints the reference ids; checked on the texts
# and on the README's paragraphs (prose, code, tables, arrows and other symbols).
reference() {
  local name="$1" tokenizer="$2"
  shift 2
  for docs in texts readme; do
    "$@" "$WORK/$docs.jsonl" > "$WORK/${name}_$docs.ref"
    check "${name}_$docs" "$tokenizer" "$WORK/${name}_$docs.ref" "$WORK/$docs.jsonl"
  done
}
cp "$TEXTS" "$WORK/texts.jsonl"
"$PY" -c '
import json, sys
for paragraph in open(sys.argv[1], encoding="utf-8").read().split("\n\n"):
    print(json.dumps({"text": paragraph}))' "$LOOM_SOURCE/README.md" > "$WORK/readme.jsonl"

# Training text: the texts themselves and the README (English, code, tables).
{ "$PY" -c 'import json,sys; [print(json.loads(l)["text"]) for l in open(sys.argv[1])]' "$TEXTS"
  cat "$LOOM_SOURCE/README.md"; } > "$WORK/train.txt"

for type in bpe unigram; do
  "$PY" "$REF/sp_encode.py" train "$WORK/train.txt" "$WORK/sp_$type" "$type" 400
  reference "sentencepiece_$type" "$WORK/sp_$type.model" "$PY" "$REF/sp_encode.py" encode "$WORK/sp_$type.model"
done

"$PY" "$REF/train_bpe.py" "$WORK/train.txt" 400 "$WORK/hf"
for shape in gpt2 llama3 smollm; do
  reference "hf_$shape" "$WORK/hf/$shape" node "$REF/hf_encode.mjs" "$WORK/hf/$shape"
done

for encoding in gpt2 cl100k_base; do
  node "$REF/tiktoken_encode.mjs" "$encoding" export "$WORK/tiktoken_$encoding"
  reference "tiktoken_$encoding" "$WORK/tiktoken_$encoding/tokenizer.json" \
    node "$REF/tiktoken_encode.mjs" "$encoding" encode
done
echo "tokenizers: all equal their references"
