#!/usr/bin/env bash
# loom's indexed datasets against Megatron-LM's own reader and writer (megatron-core's
# IndexedDatasetBuilder and IndexedDataset, tests/reference/megatron_datasets.py):
#  1. loom prepare writes the files Megatron-LM writes for the same documents, byte for byte: the
#     byte tokenizer, GPT-2's tokenizer.json (uint16, with and without --append-eod) and cl100k's
#     (int32, as Megatron-LM picks by vocabulary size).
#  2. Datasets Megatron-LM writes with documents of several sentences (int32), and with documents
#     that hold no sequence and sequences of no tokens (uint16), train to exactly the losses and
#     validation losses of loom's own dataset of the same documents whole, under a data.split whose
#     cut falls inside a document of several sentences; the control, every sentence a document of
#     its own, moves the cut and so the validation loss (the check can tell them apart).
#  3. A multimodal index (a mode per sequence) is refused naming it (exit 2).
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=1
REF="$LOOM_SOURCE/tests/reference"
TOKENIZERS="$LOOM_SOURCE/tests/data/tokenizers"
PY=python3  # the project venv's (first on PATH under ctest)
"$PY" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('megatron.core') is None)" ||
  fail "megatron-core is not installed: run scripts/setup.sh --tests"
megatron() { "$PY" "$REF/megatron_datasets.py" "$@" > "$WORK/megatron.log" 2>&1 || { cat "$WORK/megatron.log"; fail "megatron_datasets.py $*"; }; }

# Megatron-LM's datasets, written in one process.
GPT2="$TOKENIZERS/gpt2/tokenizer.json"
CL100K="$TOKENIZERS/cl100k-llama3-form/tokenizer.json"
megatron tokens "$REF/texts.jsonl" "$WORK/mg_byte" byte + tokens "$REF/texts.jsonl" "$WORK/mg_gpt2" "$GPT2" \
  + tokens "$REF/texts.jsonl" "$WORK/mg_gpt2_eod" "$GPT2" --append-eod + tokens "$REF/texts.jsonl" "$WORK/mg_cl100k" "$CL100K" \
  + texts "$WORK/whole.jsonl" + sentences "$WORK/mg_documents" documents + sentences "$WORK/mg_gaps" gaps \
  + sentences "$WORK/mg_each" each + multimodal "$WORK/mm"

# 1. The same files as Megatron-LM's writer.
same_files() {  # NAME TOKENIZER [--append-eod]
  local name="$1" tokenizer="$2"
  shift 2
  "$LOOM" prepare --input "$REF/texts.jsonl" --output "$WORK/loom_$name" --tokenizer "$tokenizer" "$@" \
    > "$WORK/prepare_$name.log" 2>&1 || { cat "$WORK/prepare_$name.log"; fail "loom prepare ($name)"; }
  for ext in idx bin; do
    cmp "$WORK/loom_$name.$ext" "$WORK/mg_$name.$ext" || fail "$name: loom's .$ext differs from Megatron-LM's"
  done
  echo "$name: .idx and .bin equal Megatron-LM's byte for byte ($(grep -o 'uint16\|int32' "$WORK/prepare_$name.log"))"
}
same_files byte byte
same_files gpt2 "$GPT2"
same_files gpt2_eod "$GPT2" --append-eod
same_files cl100k "$CL100K"
grep -q int32 "$WORK/prepare_cl100k.log" || fail "cl100k's vocabulary of 100277 did not give int32 tokens"

# 2. Megatron-LM's documents of sentences train as loom's whole documents.
"$LOOM" prepare --input "$WORK/whole.jsonl" --output "$WORK/whole" > /dev/null 2>&1 || fail "loom prepare (whole)"
# 86% of the tokens falls inside a document of several sentences (see the control below).
TRAIN=(--set model.vocab_size=256 --set data.split=86,14,0 --set eval.interval=3 --set eval.steps=1
  --set train.steps=3 --set train.warmup_steps=1 --set log.interval=1)
for data in whole mg_documents mg_gaps mg_each; do
  run_loom 1 "run_$data" --set "data.path=$WORK/$data" "${TRAIN[@]}" || { cat "$WORK/run_$data.log"; fail "train on $data"; }
done
"$PY" - "$WORK" << 'PY'
import json, sys
work = sys.argv[1]
def record(name):
    rows = [json.loads(line) for line in open(f"{work}/run_{name}/metrics.jsonl")]
    losses = [(r["step"], r["loss"]) for r in rows if "loss" in r and "step" in r]
    valid = [(r["step"], r["val_loss"]) for r in rows if "val_loss" in r]
    assert len(losses) == 3 and len(valid) == 1, (name, losses, valid)
    return losses, valid
whole = record("whole")
for name in ("mg_documents", "mg_gaps"):
    got = record(name)
    if got != whole:
        sys.exit(f"FAIL: training on Megatron-LM's {name} gave {got}, on loom's whole documents {whole}")
    print(f"{name}: losses and validation loss equal loom's whole documents exactly {got}")
each = record("mg_each")
if each[1] == whole[1]:
    sys.exit("FAIL: the control (every sentence a document) gave the same validation loss: the check cannot tell")
print(f"control, every sentence a document: validation loss {each[1]} (whole documents: {whole[1]})")
PY

# 3. Multimodal indexes are refused, naming the file.
expect_exit 2 "mm.idx' is a Megatron-LM multimodal index" "$LOOM" train "$TINY" --run-dir "$WORK/mm_run" \
  --set "data.path=$WORK/mm" --set train.steps=1 --set train.warmup_steps=0
echo "megatron_reference: loom's datasets are Megatron-LM's, both ways"
