#!/usr/bin/env bash
# loom prepare end to end: plain files (a document each, or a paragraph each), JSON lines
# with --json-key, several inputs, empty documents left out, --add-bos/--append-eod,
# uint16 or int32 by vocabulary size, the sidecar, --workers 4 byte-identical to
# --workers 1, bad JSON lines refused naming FILE:LINE, inputs compressed by gzip or zstd, and binary
# files (Parquet, archives) refused.
source "$(dirname "$0")/common.sh"
REF="$LOOM_SOURCE/tests/reference"
PY=python3  # the project venv's (first on PATH under ctest)

# expect_ids PREFIX LABEL PYTHON_EXPR: the dataset's sequences equal the JSON list PYTHON_EXPR builds.
expect_ids() {
  "$PY" -c "import json; [print(json.dumps(d)) for d in $3]" > "$WORK/$2.expected"
  "$PY" "$REF/compare_ids.py" "$1" "$WORK/$2.expected" "$2" || fail "$2"
}
sidecar() { "$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1.json" "$2"; }
expect_exit2() {  # MESSAGE ARGS...: loom exits 2 with MESSAGE on stderr
  local message="$1" code=0
  shift
  "$LOOM" "$@" > "$WORK/err.log" 2>&1 || code=$?
  [ "$code" = 2 ] || { cat "$WORK/err.log"; fail "exit $code, not 2, for: $*"; }
  grep -qF -- "$message" "$WORK/err.log" || { cat "$WORK/err.log"; fail "no '$message' for: $*"; }
}

printf 'first paragraph\nstill first\n\n  \t\nsecond\n\n\n' > "$WORK/a.txt"
printf 'caf\xc3\xa9 \xf0\x9f\x98\x80' > "$WORK/b.txt"
: > "$WORK/empty.txt"

# A document per file (the empty file left out), bytes as ids, 256 closing each with --append-eod.
"$LOOM" prepare --input "$WORK/a.txt" "$WORK/empty.txt" "$WORK/b.txt" --output "$WORK/files" --append-eod \
  > "$WORK/files.log" 2>&1 || { cat "$WORK/files.log"; fail "prepare files"; }
grep -q "left out 1 empty documents" "$WORK/files.log" || fail "the empty document is not reported"
# Only empty documents: nothing is written (a dataset of no sequence trains nothing).
expect_exit2 "none with a token" prepare --input "$WORK/empty.txt" --output "$WORK/nothing"
[ -z "$(ls "$WORK" | grep '^nothing')" ] || fail "an empty prepare left files: $(ls "$WORK" | grep '^nothing')"
expect_ids "$WORK/files" files "[list(open(p,'rb').read()) + [256] for p in ['$WORK/a.txt', '$WORK/b.txt']]"
[ "$(sidecar "$WORK/files" dtype)" = uint16 ] || fail "byte tokenizer dataset is not uint16"
[ "$(sidecar "$WORK/files" documents)" = 2 ] || fail "sidecar documents"
[ "$(sidecar "$WORK/files" eos_id)" = 256 ] || fail "sidecar eos_id"
[ "$(sidecar "$WORK/files" max_token_id)" = 256 ] || fail "sidecar max_token_id"
[ "$(sidecar "$WORK/files" tokens)" = $(($(wc -c < "$WORK/a.txt") + $(wc -c < "$WORK/b.txt") + 2)) ] ||
  fail "sidecar tokens"

# A document per paragraph: blank lines (spaces and tabs too) separate them.
"$LOOM" prepare --input "$WORK/a.txt" "$WORK/b.txt" --output "$WORK/paragraphs" --split-paragraphs > /dev/null
expect_ids "$WORK/paragraphs" paragraphs \
  "[list(s.encode()) for s in ['first paragraph\nstill first', 'second', 'café 😀']]"
# Windows line ends: a paragraph keeps its inner CRLF, and its last line's '\r' goes with the newline.
printf 'line one\r\nline two\r\n\r\nthird\r\n' > "$WORK/crlf.txt"
"$LOOM" prepare --input "$WORK/crlf.txt" --output "$WORK/new/folder/crlf" --split-paragraphs > /dev/null  # folders made
expect_ids "$WORK/new/folder/crlf" crlf "[list(s.encode()) for s in ['line one\r\nline two', 'third']]"

# JSON lines, the text under --json-key; a blank line is skipped, a document may hold paragraphs.
printf '{"body": "one", "id": 1}\n\n{"body": "two\\n\\nthree"}\n' > "$WORK/docs.jsonl"
"$LOOM" prepare --input "$WORK/docs.jsonl" "$WORK/b.txt" --json-key body --output "$WORK/json" > /dev/null
expect_ids "$WORK/json" json "[list(s.encode()) for s in ['one', 'two\n\nthree', 'café 😀']]"
"$LOOM" prepare --input "$WORK/docs.jsonl" --json-key body --split-paragraphs --output "$WORK/json_p" > /dev/null
expect_ids "$WORK/json_p" json_paragraphs "[list(s.encode()) for s in ['one', 'two', 'three']]"
# A short file whose last line has no newline (its byte count had passed the file's, and the progress line failed).
printf '{"text":"ab"}' > "$WORK/short.jsonl"
"$LOOM" prepare --input "$WORK/short.jsonl" --output "$WORK/short" > /dev/null
expect_ids "$WORK/short" short_jsonl "[list(b'ab')]"

# Bad JSON lines and keys name the file and line; nothing is written.
printf '{"text": "fine"}\n{"text": broken\n' > "$WORK/bad.jsonl"
expect_exit2 "bad.jsonl:2: not a JSON line (parse error at line 1, column 10" prepare --input "$WORK/bad.jsonl" --output "$WORK/bad"
expect_exit2 "docs.jsonl:1: the JSON line has no key 'text'" prepare --input "$WORK/docs.jsonl" --output "$WORK/bad"
[ -z "$(ls "$WORK" | grep '^bad\.\(bin\|idx\|json\)$')" ] || fail "a failed prepare left files behind"
expect_exit2 "--add-bos: tokenizer 'byte' has no BOS" prepare --input "$WORK/a.txt" --output "$WORK/bad" --add-bos
expect_exit2 "--workers must be at least 1" prepare --input "$WORK/a.txt" --output "$WORK/bad" --workers 0
# An output that is an input (the user's only copy) or a directory is refused, the input kept.
echo '{"text": "my only copy"}' > "$WORK/corpus.json"
expect_exit2 "would write '$WORK/corpus.json' over the input '$WORK/corpus.json'" prepare --input "$WORK/corpus.json" \
  --output "$WORK/corpus"
grep -q "my only copy" "$WORK/corpus.json" || fail "prepare replaced its own input"
mkdir -p "$WORK/dir.bin"
expect_exit2 "--output: '$WORK/dir.bin' is a directory" prepare --input "$WORK/a.txt" --output "$WORK/dir"
expect_exit2 "--output must name a file prefix" prepare --input "$WORK/a.txt" --output "$WORK/"
expect_exit2 "is not known" prepare --input "$WORK/a.txt" --output "$WORK/bad" --tokenizer gpt9

# A byte-level BPE learned from the README, Llama 3 shaped (BOS and EOS named by its tokenizer_config.json).
"$PY" "$REF/train_bpe.py" "$LOOM_SOURCE/README.md" 200 "$WORK/hf"
TOK="$WORK/hf/llama3"
"$LOOM" prepare --input "$WORK/a.txt" "$WORK/b.txt" --tokenizer "$TOK" --output "$WORK/bpe" --split-paragraphs \
  --add-bos --append-eod > /dev/null
bos="$(sidecar "$WORK/bpe" bos_id)" eos="$(sidecar "$WORK/bpe" eos_id)"
"$PY" -c "
import sys; sys.path.insert(0, '$REF'); from compare_ids import read_dataset
seqs = read_dataset('$WORK/bpe')
assert len(seqs) == 3, seqs
assert all(s[0] == $bos and s[-1] == $eos and len(s) > 2 for s in seqs), seqs
" || fail "every document starts with BOS $bos and ends with EOS $eos"
[ "$(sidecar "$WORK/bpe" tokenizer)" = hf-bpe ] || fail "sidecar tokenizer"
[ "$(sidecar "$WORK/bpe" add_bos):$(sidecar "$WORK/bpe" append_eod)" = True:True ] ||
  fail "the sidecar should record --add-bos and --append-eod"
[ "$(sidecar "$WORK/paragraphs" add_bos):$(sidecar "$WORK/paragraphs" append_eod)" = False:False ] ||
  fail "the sidecar should record that neither was given"
# A tokenizer without an EOS cannot end documents with one.
mkdir "$WORK/no_eos"
"$PY" -c "
import json; t = json.load(open('$TOK/tokenizer.json')); t['added_tokens'] = []
json.dump(t, open('$WORK/no_eos/tokenizer.json', 'w'))"
expect_exit2 "--append-eod: tokenizer '$WORK/no_eos' has no EOS" prepare --input "$WORK/a.txt" --output "$WORK/bad" \
  --tokenizer "$WORK/no_eos" --append-eod

# Text that is not UTF-8 cannot be byte-level BPE'd: the error names the file.
printf 'fine\n\nnot \xff utf-8\n' > "$WORK/latin1.txt"
expect_exit2 "latin1.txt:3: the text is not valid UTF-8" prepare --input "$WORK/latin1.txt" --output "$WORK/bad" \
  --tokenizer "$TOK" --split-paragraphs

# A vocabulary past 65536 ids is written as int32, and the large id survives (the token at 70000
# in model.vocab: an added token's own id is where the library numbers it, past the vocabulary).
"$PY" -c "
import json; t = json.load(open('$TOK/tokenizer.json'))
t['model']['vocab']['<|big|>'] = 70000
t['added_tokens'].append({'id': 70000, 'content': '<|big|>', 'special': True})
json.dump(t, open('$WORK/big_tokenizer.json', 'w'))"
printf 'x<|big|>y' > "$WORK/big.txt"
"$LOOM" prepare --input "$WORK/big.txt" --tokenizer "$WORK/big_tokenizer.json" --output "$WORK/big" > /dev/null
[ "$(sidecar "$WORK/big" dtype)" = int32 ] || fail "a 70001-id vocabulary is not int32"
[ "$(sidecar "$WORK/big" vocab_size)" = 70001 ] || fail "sidecar vocab_size"
"$PY" -c "
import sys; sys.path.insert(0, '$REF'); from compare_ids import read_dataset
assert 70000 in read_dataset('$WORK/big')[0]" || fail "id 70000 lost in the int32 dataset"

# --workers 4 equals --workers 1 byte for byte, over several batches of documents.
"$PY" -c "
import json, random
random.seed(3)
words = open('$LOOM_SOURCE/README.md', encoding='utf-8').read().split()
with open('$WORK/many.jsonl', 'w') as f:
    for i in range(2500):
        print(json.dumps({'text': ' '.join(random.choice(words) for _ in range(random.randint(0, 40)))}), file=f)"
for workers in 1 4; do
  "$LOOM" prepare --input "$WORK/many.jsonl" --tokenizer "$TOK" --output "$WORK/w$workers" --workers "$workers" \
    --append-eod > "$WORK/w$workers.log" 2>&1 || { cat "$WORK/w$workers.log"; fail "prepare --workers $workers"; }
done
for ext in bin idx json; do cmp "$WORK/w1.$ext" "$WORK/w4.$ext" || fail "--workers 4 changed PREFIX.$ext"; done
grep -q "documents/s" "$WORK/w4.log" || fail "no progress line"

# A plain file is read by paragraphs in chunks of 16 MB cut at blank lines: 20 MB of paragraphs
# (LF and CRLF, blank lines with spaces) give the same documents as the text read whole would.
"$PY" - "$WORK" << 'PY'
import hashlib, json, random, sys
import numpy
work = sys.argv[1]
random.seed(5)
words = "alpha beta gamma delta epsilon zeta eta theta".split()
paragraphs, size = [], 0
with open(f"{work}/paragraphs.txt", "w", newline="") as f:
    while size < 20_000_000:
        lines = [" ".join(random.choice(words) for _ in range(random.randint(1, 30))) for _ in range(random.randint(1, 4))]
        separator = random.choice(["\n\n", "\n \n", "\r\n\r\n", "\n\n\n"])
        paragraph = ("\r\n" if separator.startswith("\r") else "\n").join(lines)
        f.write(paragraph + separator)
        paragraphs.append(paragraph)
        size += len(paragraph) + len(separator)
expected = numpy.frombuffer("".join(paragraphs).encode(), dtype=numpy.uint8).astype("<u2")  # a byte, a uint16
json.dump({"documents": len(paragraphs), "bin_sha256": hashlib.sha256(expected.tobytes()).hexdigest()},
          open(f"{work}/paragraphs.expected", "w"))
PY
"$LOOM" prepare --input "$WORK/paragraphs.txt" --output "$WORK/paragraphs" --split-paragraphs > /dev/null ||
  fail "prepare 20 MB of paragraphs"
"$PY" -c "
import hashlib, json, sys
e = json.load(open('$WORK/paragraphs.expected'))
got = hashlib.sha256(open('$WORK/paragraphs.bin', 'rb').read()).hexdigest()
docs = json.load(open('$WORK/paragraphs.json'))['documents']
sys.exit(0 if (got, docs) == (e['bin_sha256'], e['documents']) else f'paragraphs: {docs} documents, bin {got}; expected {e}')" ||
  fail "20 MB of paragraphs read in chunks differ from the text's paragraphs"

# Only a dataset is written over: a train.json of the user's own beside train.jsonl, or a notes.bin
# beside no index, is refused and left as it was; an .NDJSON file (any case) is JSON lines.
printf '{"text": "alpha"}\n{"text": "beta"}\n' > "$WORK/train.jsonl"
printf '{"text": "my own corpus"}\n' > "$WORK/train.json"
expect_exit2 "would write its sidecar over '$WORK/train.json', which is not one loom prepare wrote" \
  prepare --input "$WORK/train.jsonl" --output "$WORK/train"
grep -q "my own corpus" "$WORK/train.json" || fail "the user's train.json was written over"
echo important > "$WORK/notes.bin"
expect_exit2 "would write over '$WORK/notes.bin' or '$WORK/notes.idx', which are not a dataset" \
  prepare --input "$WORK/train.jsonl" --output "$WORK/notes"
grep -q important "$WORK/notes.bin" || fail "the user's notes.bin was written over"
cp "$WORK/train.jsonl" "$WORK/train.NDJSON"
"$LOOM" prepare --input "$WORK/train.NDJSON" --output "$WORK/nd" > /dev/null || fail "prepare .NDJSON"
[ "$(sidecar "$WORK/nd" documents)" = 2 ] || fail "an .NDJSON file was not read as JSON lines"
"$LOOM" prepare --input "$WORK/train.jsonl" --output "$WORK/nd" > /dev/null || fail "preparing a dataset again"
# Two prepares to one prefix: the second is refused while the first holds the prefix's lock.
# (The holder is the sleep itself, the lock on its descriptor 9, its output nowhere: killing it
# releases the lock and leaves nothing holding this script's pipes.)
(
  exec 9> "$WORK/.loom-prepare-held.lock"
  flock 9
  exec sleep 600
) > /dev/null 2>&1 &
holder=$!
for _ in $(seq 100); do flock -n "$WORK/.loom-prepare-held.lock" true 2> /dev/null || break; sleep 0.1; done
expect_exit2 "is being locked by another loom job" prepare --input "$WORK/train.jsonl" --output "$WORK/held"
kill "$holder" 2> /dev/null || true
[ ! -e "$WORK/held.bin" ] || fail "a refused prepare wrote its dataset"

# Compressed inputs (gzip's and zstd's own tools compress them): the dataset is byte for byte the
# uncompressed file's, for JSON lines and for paragraphs of text, several members or frames read as
# one text; a cut-off file, or one that is not what its name says, exits 2 naming it, writing nothing.
"$PY" -c "
import json, random
random.seed(7)
words = ['alpha', 'beta', 'gamma', 'δέλτα', '😀', 'the', 'pipeline']
with open('$WORK/big.jsonl', 'w') as f:  # ~2 MB: many of the reader's buffers
    for _ in range(2500):
        f.write(json.dumps({'text': ' '.join(random.choice(words) for _ in range(random.randint(1, 300)))}) + '\\n')
with open('$WORK/para.txt', 'w') as f:
    for i in range(3000):
        f.write(' '.join(random.choice(words) for _ in range(random.randint(1, 40))) + ('\\n\\n' if i % 3 == 2 else '\\n'))"
gzip -k -c "$WORK/big.jsonl" > "$WORK/big.JSONL.GZ"
zstd -q -c "$WORK/big.jsonl" > "$WORK/big.jsonl.zst"
zstd -q -c "$WORK/para.txt" > "$WORK/para.txt.zstd"
cat "$WORK/big.JSONL.GZ" "$WORK/big.JSONL.GZ" > "$WORK/twice.jsonl.gz"
cat "$WORK/big.jsonl.zst" "$WORK/big.jsonl.zst" > "$WORK/twice.jsonl.zst"
same_dataset() {  # same_dataset A B: two prefixes' .bin and .idx are equal
  cmp -s "$1.bin" "$2.bin" && cmp -s "$1.idx" "$2.idx" || fail "$(basename "$2") differs from $(basename "$1")"
}
packed() {  # packed NAME ARGS...: prepare into $WORK/NAME
  local name="$1"
  shift
  "$LOOM" prepare --output "$WORK/$name" "$@" > "$WORK/$name.log" 2>&1 || { cat "$WORK/$name.log"; fail "prepare $name"; }
}
packed big_plain --input "$WORK/big.jsonl"
packed big_gz --input "$WORK/big.JSONL.GZ" --workers 3
packed big_zst --input "$WORK/big.jsonl.zst"
same_dataset "$WORK/big_plain" "$WORK/big_gz"
same_dataset "$WORK/big_plain" "$WORK/big_zst"
packed twice_plain --input "$WORK/big.jsonl" "$WORK/big.jsonl"
packed twice_gz --input "$WORK/twice.jsonl.gz"
packed twice_zst --input "$WORK/twice.jsonl.zst"
same_dataset "$WORK/twice_plain" "$WORK/twice_gz"
same_dataset "$WORK/twice_plain" "$WORK/twice_zst"
packed para_plain --input "$WORK/para.txt" --split-paragraphs
packed para_zst --input "$WORK/para.txt.zstd" --split-paragraphs
same_dataset "$WORK/para_plain" "$WORK/para_zst"
[ "$(sidecar "$WORK/para_zst" documents)" = 1000 ] || fail "paragraphs of a compressed text: $(sidecar "$WORK/para_zst" documents)"
# Zeros after a member are padding, passed over as gzip -d and Python's gzip pass over them.
"$PY" -c "import gzip; open('$WORK/padded.jsonl.gz', 'wb').write(gzip.compress(open('$WORK/big.jsonl', 'rb').read()) + bytes(512))"
packed padded_gz --input "$WORK/padded.jsonl.gz"
same_dataset "$WORK/big_plain" "$WORK/padded_gz"
# An empty compressed file is a failed download, as gzip -d and zstd -d say.
: > "$WORK/empty.jsonl.zst"
expect_exit2 "input '$WORK/empty.jsonl.zst' holds no zstd data" prepare --input "$WORK/big.jsonl" "$WORK/empty.jsonl.zst" \
  --output "$WORK/cut"
head -c 100000 "$WORK/big.JSONL.GZ" > "$WORK/cut.jsonl.gz"
head -c 100000 "$WORK/big.jsonl.zst" > "$WORK/cut.jsonl.zst"
cp "$WORK/big.jsonl" "$WORK/plain.jsonl.gz"
expect_exit2 "input '$WORK/cut.jsonl.gz' ends in the middle of its gzip data, after 100000 bytes" \
  prepare --input "$WORK/cut.jsonl.gz" --output "$WORK/cut"
expect_exit2 "input '$WORK/cut.jsonl.zst' ends in the middle of its zstd data" \
  prepare --input "$WORK/big.jsonl.zst" "$WORK/cut.jsonl.zst" --output "$WORK/cut"
expect_exit2 "input '$WORK/plain.jsonl.gz' cannot be read as gzip data" \
  prepare --input "$WORK/plain.jsonl.gz" --output "$WORK/cut"
# A binary file read as text would train on garbage: Parquet, an archive (inside gzip too), gzip data
# under a plain name and a Megatron-LM index are named; a text that begins with a magic is text.
"$PY" -c "open('$WORK/rows.parquet', 'wb').write(b'PAR1\\x15\\x04\\x15\\x00' + b'x' * 100 + b'PAR1')"
(cd "$WORK" && tar czf shards.tar.gz big.jsonl)
cp "$WORK/big.JSONL.GZ" "$WORK/unnamed.jsonl"
expect_exit2 "input '$WORK/rows.parquet' is Parquet" prepare --input "$WORK/rows.parquet" --output "$WORK/cut"
expect_exit2 "input '$WORK/shards.tar.gz' is a tar archive" prepare --input "$WORK/shards.tar.gz" --output "$WORK/cut"
expect_exit2 "input '$WORK/unnamed.jsonl' is gzip data (a name ending in .gz" prepare --input "$WORK/unnamed.jsonl" --output "$WORK/cut"
expect_exit2 "is a Megatron-LM index" prepare --input "$WORK/big_plain.idx" --output "$WORK/cut"
expect_exit2 "input '$WORK/big_plain.bin' is binary data (NUL bytes" prepare --input "$WORK/big_plain.bin" --output "$WORK/cut"
printf 'some text\n' | iconv -t UTF-16 > "$WORK/utf16.txt"
expect_exit2 "is UTF-16 or UTF-32 text (convert it to UTF-8 first" prepare --input "$WORK/utf16.txt" --output "$WORK/cut"
printf 'PAR1 of the report\n' > "$WORK/par.txt"
packed par_text --input "$WORK/par.txt"
# A flag where --input's FILE goes is named (CLI11 took it for a file, and said "--output is required").
expect_exit2 "--input: '--output' is a flag where a FILE goes" prepare --input --output "$WORK/cut"
[ -z "$(ls "$WORK" | grep -E '^cut\.(bin|idx|json)$')" ] || fail "a refused compressed input left its dataset's files"

# Before step 1, loom train refuses: a negative id (padding from another tool) in a dataset without
# a sidecar, found by the scan; a sidecar that describes another index (stale); datasets of one run
# made with different tokenizers (a blend, or validation data).
TRAIN=(train "$LOOM_SOURCE/tests/configs/tiny.yaml" --set train.steps=1 --set train.warmup_steps=0)
cp "$WORK/big.bin" "$WORK/neg.bin" && cp "$WORK/big.idx" "$WORK/neg.idx"
"$PY" -c "
import struct; p = '$WORK/neg.bin'; b = bytearray(open(p, 'rb').read())
i = b.index(struct.pack('<i', 70000)); b[i:i + 4] = struct.pack('<i', -1); open(p, 'wb').write(b)"
expect_exit2 "data.path '$WORK/neg' holds token id -1, which no embedding row has" "${TRAIN[@]}" \
  --run-dir "$WORK/neg_run" --set model.vocab_size=70001 --set data.path="$WORK/neg"
cp "$WORK/files.bin" "$WORK/stale.bin" && cp "$WORK/files.idx" "$WORK/stale.idx" && cp "$WORK/nd.json" "$WORK/stale.json"
expect_exit2 "its sidecar $WORK/stale.json describes 2 documents" "${TRAIN[@]}" --run-dir "$WORK/stale_run" \
  --set model.vocab_size=257 --set data.path="$WORK/stale"
expect_exit2 "one run's datasets share a tokenizer" "${TRAIN[@]}" --run-dir "$WORK/mixed_run" \
  --set model.vocab_size=128256 --set "data.path=0.5 $WORK/files 0.5 $WORK/w1"
# Two tokenizers of one kind and vocabulary size (here one sidecar's CRC-32C as another file's would
# read) are two tokenizers too.
printf 'some text to tokenize\n' > "$WORK/sp_text.txt"
for name in sp_a sp_b; do
  "$LOOM" prepare --input "$WORK/sp_text.txt" --tokenizer "$LOOM_SOURCE/tests/reference/tiny_unigram.model" \
    --output "$WORK/$name" > /dev/null 2>&1 || fail "prepare $name"
done
"$PY" -c "import json, sys; s = json.load(open(sys.argv[1])); s['tokenizer_crc32c'] ^= 1; json.dump(s, open(sys.argv[1], 'w'))" \
  "$WORK/sp_b.json"
# A model directory with only SentencePiece's tokenizer.model is read through it, as generate reads it.
mkdir -p "$WORK/sp_dir" && cp "$LOOM_SOURCE/tests/reference/tiny_unigram.model" "$WORK/sp_dir/tokenizer.model"
"$LOOM" prepare --input "$WORK/sp_text.txt" --tokenizer "$WORK/sp_dir" --output "$WORK/sp_from_dir" > /dev/null 2>&1 ||
  fail "prepare --tokenizer DIR holding tokenizer.model"
cmp -s "$WORK/sp_a.bin" "$WORK/sp_from_dir.bin" || fail "a directory's tokenizer.model gave other ids"
[ "$(sidecar "$WORK/sp_from_dir" tokenizer_source)" = "$WORK/sp_dir/tokenizer.model" ] || fail "sidecar of a directory's model"
mkdir -p "$WORK/no_tokenizer"
expect_exit2 "is a directory with neither tokenizer.json nor tokenizer.model" prepare --input "$WORK/sp_text.txt" \
  --tokenizer "$WORK/no_tokenizer" --output "$WORK/x"
expect_exit2 "(another file: their tokenizer_crc32c differ): one run's datasets share a tokenizer" "${TRAIN[@]}" \
  --run-dir "$WORK/sp_mixed_run" --set model.vocab_size=300 --set "data.path=0.5 $WORK/sp_a 0.5 $WORK/sp_b"
echo "prepare: all checks passed"
