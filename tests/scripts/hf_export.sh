#!/usr/bin/env bash
# Hugging Face interop: `loom export --format hf-gpt2` writes valid safetensors
# (parsed here independently of loom's writer) with GPT-2's names and Conv1D
# layouts, as one file or as a model directory (config.json beside the same
# bytes); a plain PyTorch GPT-2 forward written from Hugging Face's
# conventions, fed that file, gives loom's first loss from init_from of the
# directory; and export -> model.init_from of the file (at another layout) ->
# export gives identical tensors.
source "$(dirname "$0")/common.sh"
PY=/usr/bin/python3  # Debian's python3-torch
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

"$PY" "$SCRIPTS/checks.py" hf-gpt2-layout "$WORK/a.safetensors" "$WORK/b.safetensors" ||
  fail "safetensors / Hugging Face layout check"
"$PY" "$SCRIPTS/checks.py" hf-gpt2-loss "$WORK/a.safetensors" "$WORK/text.txt" "$WORK/c" ||
  fail "the Hugging Face-convention forward of the export differs from loom's first loss"
echo "hf export: ok"
