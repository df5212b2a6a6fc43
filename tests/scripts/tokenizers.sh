#!/usr/bin/env bash
# loom's tokenizers against the reference libraries themselves, document by document, through
# `loom prepare` (the dataset is read back and compared with the reference's ids): SentencePiece
# models (bpe and unigram) trained here, encoded by `sentencepiece`; byte-level BPE tokenizer.json
# files learned here (GPT-2, Llama 3 and SmolLM shapes), encoded by Hugging Face's `tokenizers`;
# GPT-2's, cl100k's and o200k's real vocabularies (tests/data/tokenizers) as tokenizer.json files,
# encoded by `tokenizers` and by `tiktoken` from the encodings' own ranks. The texts
# (tests/reference/texts.jsonl) hold accents, CJK, emoji, runs of whitespace, special tokens,
# contractions, digits and an empty document; the README's paragraphs are checked too.
source "$(dirname "$0")/common.sh"
REF="$LOOM_SOURCE/tests/reference"
DATA="$LOOM_SOURCE/tests/data/tokenizers"
TEXTS="$REF/texts.jsonl"
PY=python3  # the project venv's (first on PATH under ctest), with the references
"$PY" -c "import sentencepiece, tokenizers, tiktoken, transformers" 2> /dev/null ||
  fail "the reference tokenizers are not installed: run scripts/setup.sh --tests"

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
# U+180E, whitespace to PCRE2's \s and no longer to Unicode's White_Space (nor to the references):
# loom split ' \u180ea' as a space and the rest, all three real vocabularies.
echo '{"text": " \u180ea, x\u180e'"'"'s and \u1820\u180e, \u1820 \u180e!"}' >> "$WORK/texts.jsonl"
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
for shape in gpt2 llama3 smollm added; do
  reference "hf_$shape" "$WORK/hf/$shape" "$PY" "$REF/hf_encode.py" "$WORK/hf/$shape"
done
# Added tokens where they overlap, sit inside words or beside odd whitespace (train_bpe.py says
# which is which).
"$PY" - "$WORK/added.jsonl" << 'EOF'
import json, sys
docs = ["xabc", "abc", "ab bc", "ab", "aab", "_ab!", "x<|e|>", "x<y", "a\u00a0[L]b", "a \u3000[L]",
        "[R]\u00a0\u2003z", "a[R] [L]b", "the other theme, the end", "bathe", "cafe\u0301 and caf\u00e9",
        "zcde cde", "cde", "ab<|e|>ab", " [B] \u2028x[B]\u3000", "[L][L] [R] [R]",
        "r\u00e9sum\u00e9 and re\u0301sume\u0301", "nul\u0000inside, after the NUL too",
        "\U0001F130ab", "ab\U0001F170", "\U0001F150ab ab"]  # squared letters: word characters to single_word
with open(sys.argv[1], "w", encoding="utf-8") as f:
    f.writelines(json.dumps({"text": d}) + "\n" for d in docs)
EOF
"$PY" "$REF/hf_encode.py" "$WORK/hf/added" "$WORK/added.jsonl" > "$WORK/hf_added_tricky.ref"
check hf_added_tricky "$WORK/hf/added" "$WORK/hf_added_tricky.ref" "$WORK/added.jsonl"
# tokenizer.json files as hand edits leave them: merges listed twice (the later rank counts) and
# added tokens written with ids the library does not give them (a gap past the vocabulary, a byte
# token's id, two listed against their ids' order): the library numbers them in list order past
# the vocabulary, and so must loom.
"$PY" - "$WORK/hf/gpt2" "$WORK/hf/edited" "$WORK/edited.jsonl" << 'EOF'
import json, os, sys
source, out, docs = sys.argv[1:4]
t = json.load(open(f"{source}/tokenizer.json"))
t["model"]["merges"] = t["model"]["merges"] + t["model"]["merges"][:40]
for content, written in [("<|gap|>", 600), ("<|clash|>", 100), ("<|second|>", 9001), ("<|first|>", 9000)]:
    t["added_tokens"].append({"id": written, "content": content, "single_word": False, "lstrip": False,
                              "rstrip": False, "normalized": False, "special": True})
# An rstrip token whose whitespace holds added tokens: the library matches them all the same.
for content, rstrip in [("[R]", True), (" y", False), ("\n", False)]:
    t["added_tokens"].append({"id": 0, "content": content, "single_word": False, "lstrip": False,
                              "rstrip": rstrip, "normalized": False, "special": False})
os.makedirs(out, exist_ok=True)
json.dump(t, open(f"{out}/tokenizer.json", "w"))
with open(docs, "w") as f:
    for d in ["a<|gap|>b", "d<|clash|>", "x<|second|>y<|first|>z", "the other theme, in the end", "[R]\n",
              "[R]\n\nz", "[R] y", "[R]\n \nz", "a [R]  [R]\t\nb"]:
        f.write(json.dumps({"text": d}) + "\n")
EOF
cat "$WORK/readme.jsonl" >> "$WORK/edited.jsonl"
"$PY" "$REF/hf_encode.py" "$WORK/hf/edited" "$WORK/edited.jsonl" > "$WORK/hf_edited.ref"
check hf_edited "$WORK/hf/edited" "$WORK/hf_edited.ref" "$WORK/edited.jsonl"
grep -q "added tokens numbered as the tokenizers library numbers them" "$WORK/hf_edited.log" ||
  { cat "$WORK/hf_edited.log"; fail "renumbered added tokens should be said"; }
# Split patterns that can match nothing: the library cuts the text at each empty match (its
# Oniguruma passes over one where the match before ended), which loom once dropped.
for split in empty_star:'x*' empty_boundary:'(?<=a)b|\b'; do
  name="${split%%:*}" pattern="${split#*:}"
  "$PY" - "$WORK/hf/gpt2" "$WORK/hf/$name" "$pattern" << 'EOF'
import json, os, sys
source, out, pattern = sys.argv[1:4]
t = json.load(open(f"{source}/tokenizer.json"))
t["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}, t["pre_tokenizer"]]}
os.makedirs(out, exist_ok=True)
json.dump(t, open(f"{out}/tokenizer.json", "w"))
EOF
  reference "hf_$name" "$WORK/hf/$name" "$PY" "$REF/hf_encode.py" "$WORK/hf/$name"
done

# One dataset per vocabulary and text set, compared with both references.
for pair in gpt2:gpt2 cl100k-llama3-form:cl100k_base o200k:o200k_base; do
  dir="${pair%%:*}" encoding="${pair#*:}"
  reference "$encoding" "$DATA/$dir/tokenizer.json" "$PY" "$REF/hf_encode.py" "$DATA/$dir"
  for docs in texts readme; do
    "$PY" "$REF/tiktoken_encode.py" "$DATA/$encoding.tiktoken" "$WORK/$docs.jsonl" > "$WORK/${encoding}_$docs.tiktoken"
    "$PY" "$REF/compare_ids.py" "$WORK/${encoding}_$docs" "$WORK/${encoding}_$docs.tiktoken" "${encoding}_${docs} (tiktoken)" ||
      fail "${encoding}_$docs: loom's ids differ from tiktoken's"
  done
done

# Whether a prompt starts with BOS: loom generate against transformers.
# compare_bos NAME YES:NO TOKENIZER_FILE SCRIPT ARGS...: SCRIPT writes $WORK/NAME/CASE directories
# and prints "CASE yes|no" for each (transformers' ids start with BOS or not), YES:NO of them;
# loom generate from each must use the directory's TOKENIZER_FILE and agree.
compare_bos() {
  local name="$1" counts="$2" file="$3" case expected got
  shift 3
  "$PY" "$@" "$WORK/$name" > "$WORK/$name.ref" 2> "$WORK/$name.log" || { cat "$WORK/$name.log"; fail "$name: $*"; }
  [ "$(grep -c " yes$" "$WORK/$name.ref"):$(grep -c " no$" "$WORK/$name.ref")" = "$counts" ] ||
    { cat "$WORK/$name.ref"; fail "$name: transformers should add BOS in $counts (yes:no) cases"; }
  while read -r case expected; do
    local err="$WORK/${name}_$case.err"
    "$LOOM" generate "$WORK/$name/$case" --prompt "hello world" --max-new-tokens 1 --temperature 0 > /dev/null \
      2> "$err" || { cat "$err"; fail "generate from $name/$case"; }
    grep -q "tokenizer $WORK/$name/$case/$file" "$err" ||
      { cat "$err"; fail "$name/$case: generate should use the directory's $file"; }
    got=no
    grep -q "prompt tokens (BOS first)" "$err" && got=yes
    [ "$got" = "$expected" ] || fail "$name/$case: transformers starts the prompt with BOS: $expected; loom: $got"
  done < "$WORK/$name.ref"
}
# A tokenizer.json with and without a template adding BOS, under four tokenizer_config.json files
# (AutoTokenizer): BOS in the 4 template cases only.
compare_bos bos 4:4 tokenizer.json "$REF/hf_adds_bos.py" "$WORK/hf/llama3"
# A SentencePiece tokenizer.model (LlamaTokenizer): no tokenizer_config.json, one naming only the
# class, add_bos_token true or false: BOS where it is true only.
compare_bos sp_bos 1:3 tokenizer.model "$REF/sp_adds_bos.py" "$REF/tiny_unigram.model"

# The comparison can fail: one reference id changed by hand is caught.
"$PY" - "$WORK/o200k_base_texts.tiktoken" "$WORK/changed.ref" << 'EOF'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
row = next(r for r in rows if len(r) > 3)
row[2] += 1
with open(sys.argv[2], "w") as f:
    f.writelines(json.dumps(r) + "\n" for r in rows)
EOF
if "$PY" "$REF/compare_ids.py" "$WORK/o200k_base_texts" "$WORK/changed.ref" changed > "$WORK/changed.log" 2>&1; then
  fail "a reference with one id changed by hand still compared equal"
fi
echo "tokenizers: all equal their references (sentencepiece, tokenizers, tiktoken); BOS as transformers adds it"
