#!/usr/bin/env bash
# Hugging Face interop: `loom export --format hf-gpt2` writes valid safetensors
# (parsed here independently of loom's writer) with GPT-2's names and Conv1D
# layouts, as one file or as a model directory (config.json beside the same
# bytes); a plain PyTorch GPT-2 forward written from Hugging Face's
# conventions, fed that file, gives loom's first loss from init_from of the
# directory; and export -> model.init_from of the file (at another layout) ->
# export gives identical tensors; init_from at a shorter seq_len takes the first rows of the
# position table, at a longer one it is refused.
source "$(dirname "$0")/common.sh"
PY=python3  # the project venv's (first on PATH under ctest)
cat "$LOOM_SOURCE/README.md" "$LOOM_SOURCE/CMakeLists.txt" > "$WORK/text.txt"
"$LOOM" prepare --input "$WORK/text.txt" --output "$WORK/ds" > /dev/null || fail "prepare"
BASE=(--set model.num_layers=2 --set model.vocab_size=256 --set data.path="$WORK/ds" --set model.dropout=0)

mpirun --oversubscribe -np 4 "$LOOM" train "$TINY" --run-dir "$WORK/a" "${BASE[@]}" --set parallel.tp=2 --set parallel.pp=2 \
  --set checkpoint.dir="$WORK/ck_a" --set train.exit_after=5 > "$WORK/a.log" 2>&1 || { cat "$WORK/a.log"; fail "run a"; }
"$LOOM" export "$WORK/ck_a/step_00000005" --format hf-gpt2 --output "$WORK/a.safetensors" || fail "export a"
"$LOOM" export "$WORK/ck_a/step_00000005" --format hf-gpt2 --output "$WORK/a_dir" || fail "export a to a directory"
cmp "$WORK/a.safetensors" "$WORK/a_dir/model.safetensors" || fail "the directory's model.safetensors differs from the file"
grep -q '"GPT2LMHeadModel"' "$WORK/a_dir/config.json" || fail "config.json names no GPT2LMHeadModel"

# From a's export, at tp=2 pp=1: the initial state saved (exit_after 0) and exported again.
mpirun --oversubscribe -np 2 "$LOOM" train "$TINY" --run-dir "$WORK/b" "${BASE[@]}" --set parallel.tp=2 \
  --set model.init_from="$WORK/a.safetensors" --set checkpoint.dir="$WORK/ck_b" --set train.exit_after=0 \
  > "$WORK/b.log" 2>&1 || { cat "$WORK/b.log"; fail "run b"; }
"$LOOM" export "$WORK/ck_b/step_00000000" --format hf-gpt2 --output "$WORK/b.safetensors" || fail "export b"

# One step from a's export (the directory) at tp=2 pp=2: its loss is the first batch's under a's weights.
mpirun --oversubscribe -np 4 "$LOOM" train "$TINY" --run-dir "$WORK/c" "${BASE[@]}" --set parallel.tp=2 --set parallel.pp=2 \
  --set model.init_from="$WORK/a_dir" --set train.steps=1 --set train.warmup_steps=0 \
  > "$WORK/c.log" 2>&1 || { cat "$WORK/c.log"; fail "run c"; }

# Fine-tuning at a shorter context: init_from a's file (positions for 32 tokens) at seq_len 16
# takes wpe's first 16 rows and every other tensor unchanged; at seq_len 64 it is refused.
"$LOOM" train "$TINY" --run-dir "$WORK/short" "${BASE[@]}" --set model.seq_len=16 \
  --set model.init_from="$WORK/a.safetensors" --set checkpoint.dir="$WORK/ck_short" --set train.exit_after=0 \
  > "$WORK/short.log" 2>&1 || { cat "$WORK/short.log"; fail "init_from at a shorter seq_len"; }
grep -q "has position embeddings for 32 tokens; the first 16 (model.seq_len) are used" "$WORK/short.log" ||
  { cat "$WORK/short.log"; fail "no line on the shortened position table"; }
"$LOOM" export "$WORK/ck_short/step_00000000" --format hf-gpt2 --output "$WORK/short.safetensors" || fail "export short"
"$PY" - "$SCRIPTS" "$WORK/a.safetensors" "$WORK/short.safetensors" << 'PYEOF' || fail "the shortened model's tensors"
import sys
sys.path.insert(0, sys.argv[1])
from checks import read_safetensors
import torch
long, _ = read_safetensors(sys.argv[2], strict=True)
short, _ = read_safetensors(sys.argv[3], strict=True)
assert sorted(long) == sorted(short), "different tensor names"
assert long["wpe.weight"].shape == (32, 32) and short["wpe.weight"].shape == (16, 32), "wpe shapes"
assert torch.equal(short["wpe.weight"], long["wpe.weight"][:16]), "wpe is not the first 16 rows"
for name in long:
    assert name == "wpe.weight" or torch.equal(long[name], short[name]), name
print("init_from at seq_len 16 of a seq_len 32 export: wpe's first 16 rows, the rest identical")
PYEOF
set +e
"$LOOM" train "$TINY" --run-dir "$WORK/long" "${BASE[@]}" --set model.seq_len=64 \
  --set model.init_from="$WORK/a.safetensors" --set train.steps=1 --set train.warmup_steps=0 > "$WORK/long.log" 2>&1
code=$?
set -e
[ "$code" = 2 ] && grep -q "a.safetensors' has position embeddings (wpe) for 32 tokens, fewer than model.seq_len = 64" \
  "$WORK/long.log" || { cat "$WORK/long.log"; fail "init_from at a longer seq_len: exit $code"; }

# An existing file is never replaced by the one-file form: exit 2 naming it, the bytes kept.
before=$(md5sum < "$WORK/b.safetensors")
set +e
"$LOOM" export "$WORK/ck_a/step_00000005" --format hf-gpt2 --output "$WORK/b.safetensors" > "$WORK/over.log" 2>&1
code=$?
set -e
[ "$code" = 2 ] && grep -q "b.safetensors' exists, and an export would replace it" "$WORK/over.log" &&
  [ "$(md5sum < "$WORK/b.safetensors")" = "$before" ] || { cat "$WORK/over.log"; fail "export onto a file: exit $code"; }

# A symbolic link as the directory: refused (the renames would replace the link itself).
ln -s "$WORK/nowhere" "$WORK/link"
expect_exit 2 "--output '$WORK/link' is a symbolic link" "$LOOM" export "$WORK/ck_a/step_00000005" --output "$WORK/link"

# A directory is replaced whole, so only an earlier loom export whose every file is written again:
# an export over it succeeds (and leaves alone the folders beside it that are named like its
# temporaries); a file it would not write (a tokenizer put there by hand) or weights no loom export
# wrote (a model from the Hub, same names) are refused, exit 2 naming the file, the bytes kept.
mkdir -p "$WORK/.a_dir.tmp" "$WORK/.a_dir.old" && echo mine > "$WORK/.a_dir.tmp/notes" && echo mine > "$WORK/.a_dir.old/notes"
"$LOOM" export "$WORK/ck_a/step_00000005" --format hf-gpt2 --output "$WORK/a_dir" > /dev/null || fail "export over an earlier export"
cmp "$WORK/a.safetensors" "$WORK/a_dir/model.safetensors" || fail "the re-export's model.safetensors"
[ -f "$WORK/.a_dir.tmp/notes" ] && [ -f "$WORK/.a_dir.old/notes" ] || fail "an export removed a folder beside its output"
ls -a "$WORK" | grep -q "export-" && fail "an export left its temporaries: $(ls -a "$WORK")"
echo '{"model": {}}' > "$WORK/a_dir/tokenizer.json"
expect_exit 2 "holds 'tokenizer.json', which this export does not write and would delete" \
  "$LOOM" export "$WORK/ck_a/step_00000005" --format hf-gpt2 --output "$WORK/a_dir"
grep -q '"model"' "$WORK/a_dir/tokenizer.json" || fail "the refused export touched tokenizer.json"
mkdir "$WORK/hub" && cp "$WORK/a_dir/config.json" "$WORK/hub/"
"$PY" -c "import torch, sys; from safetensors.torch import save_file; save_file({'wte.weight': torch.ones(2, 2)}, sys.argv[1], metadata={'format': 'pt'})" \
  "$WORK/hub/model.safetensors"
before=$(md5sum < "$WORK/hub/model.safetensors")
expect_exit 2 "holds 'model.safetensors', weights that no loom export wrote" \
  "$LOOM" export "$WORK/ck_a/step_00000005" --format hf-gpt2 --output "$WORK/hub"
[ "$(md5sum < "$WORK/hub/model.safetensors")" = "$before" ] || fail "the refused export touched the Hub model"
mkdir "$WORK/configs_only" && cp "$WORK/a_dir/config.json" "$WORK/configs_only/"
expect_exit 2 "holds 'config.json', which is not part of an earlier loom export" \
  "$LOOM" export "$WORK/ck_a/step_00000005" --format hf-gpt2 --output "$WORK/configs_only"

"$PY" "$SCRIPTS/checks.py" hf-gpt2-layout "$WORK/a.safetensors" "$WORK/b.safetensors" ||
  fail "safetensors / Hugging Face layout check"
"$PY" "$SCRIPTS/checks.py" hf-gpt2-loss "$WORK/a.safetensors" "$WORK/text.txt" "$WORK/c" ||
  fail "the Hugging Face-convention forward of the export differs from loom's first loss"
echo "hf export: ok"
