#!/usr/bin/env bash
# PyTorch itself as the reference for a whole training step: bench/reference_gpt.py (the same GPT
# written as PyTorch 2.x code: DistributedDataParallel over gloo, fused AdamW with matrices decayed,
# clip_grad_norm_, loom's warm-up and cosine, no_sync over the micro-batches) at dp 4 under torchrun
# draws the initial weights and writes them as GPT-2 safetensors, and reads loom's samples in loom's
# shuffled order (--loom-order). loom starts from those weights (model.init_from) and trains the
# same 20 steps at dp 4 and at tp 2 x pp 2 (two micro-batches per rank, then eight per step):
# every step's loss equals PyTorch's within 1e-5. Without clipping PyTorch's run differs, so the
# comparison can fail. With data.eod_mask_loss, loom at tp 2 x cp 2 equals PyTorch with ignore_index.
source "$(dirname "$0")/common.sh"
PY=python3  # the project venv's (first on PATH under ctest), with torch

cat "$LOOM_SOURCE/README.md" "$LOOM_SOURCE/CMakeLists.txt" > "$WORK/text.txt"
"$LOOM" prepare --input "$WORK/text.txt" --output "$WORK/ds" --tokenizer byte > /dev/null || fail "prepare"
SHAPE=(--layers 2 --hidden 64 --heads 4 --seq-len 32 --vocab 256 --global-batch 16 --micro-batch 2 --steps 20
  --lr 0.003 --min-lr 0.0003 --lr-warmup-steps 5 --weight-decay 0.1 --grad-clip 1.0 --data "$WORK/ds" --seed 7)
LOOM_SHAPE=(--set model.num_layers=2 --set model.hidden_size=64 --set model.num_heads=4 --set model.seq_len=32
  --set model.vocab_size=256 --set train.global_batch_size=16 --set train.micro_batch_size=2 --set train.steps=20
  --set train.lr=0.003 --set train.min_lr=0.0003 --set train.warmup_steps=5 --set train.weight_decay=0.1
  --set train.grad_clip=1.0 --set data.path="$WORK/ds" --set data.order=shuffled --set train.seed=7
  --set model.init_from="$WORK/init.safetensors")

# One PyTorch run at dp 4 under torchrun, its ranks' stderr in $WORK/NAME.err. Gloo binds loopback
# (GLOO_SOCKET_IFNAME=lo), as loom's own single-host groups do, not whatever the host name resolves to.
torch_dp4() {
  local name="$1"
  shift
  GLOO_SOCKET_IFNAME=lo "$PY" -m torch.distributed.run --nproc_per_node 4 --master_port "$(free_port)" \
    "$LOOM_SOURCE/bench/reference_gpt.py" "${SHAPE[@]}" --loom-order "$@" > "$WORK/$name.out" 2> "$WORK/$name.err"
}
# pytorch NAME [args...]: reference_gpt.py at dp 4; its result line in $WORK/NAME.json. A reference
# rank killed by a signal is PyTorch's process failing, not a result: it is shown in full and the run
# is made once more. A second crash, or any ordinary error, fails the test. (Ranks aborted at exit in
# CI, "terminate called without an active exception", 3 runs of 4 on 2026-12-05: a gloo worker
# thread met the interpreter's finalisation; reference_gpt.py now leaves without it, 0 of 30 since.)
pytorch() {
  local name="$1"
  shift
  if ! torch_dp4 "$name" "$@"; then
    grep -v '^\s*$' "$WORK/$name.err" | head -60
    grep -q 'Signal [0-9]* (SIG' "$WORK/$name.err" || fail "$name"
    echo "$name: a PyTorch rank died of a signal (above); running the reference once more"
    torch_dp4 "$name" "$@" || { grep -v '^\s*$' "$WORK/$name.err" | head -60; fail "$name, twice"; }
  fi
  grep '^{"side"' "$WORK/$name.out" > "$WORK/$name.json" || { cat "$WORK/$name.out"; fail "$name printed no result"; }
}
pytorch torch_ref --save-init "$WORK/init.safetensors"
pytorch torch_no_clip --grad-clip 0
# data.eod_mask_loss against PyTorch's ignore_index: the targets after each newline (id 10, standing
# for an end-of-document id) are left out, the loss the mean over the global batch's targets left.
pytorch torch_eod --eod-mask-loss 10

run_loom 4 dp4 "${LOOM_SHAPE[@]}" || { cat "$WORK/dp4.log"; fail "loom at dp 4"; }
run_loom 4 tp2_pp2 "${LOOM_SHAPE[@]}" --set parallel.tp=2 --set parallel.pp=2 || { cat "$WORK/tp2_pp2.log"; fail "loom at tp 2 x pp 2"; }
# Masked at tp 2 x cp 2 (the vocabulary-parallel loss's ignored rows, a cp split of each sample, its
# micro-batches of 4 holding other counts of targets than PyTorch's of 2 per rank).
run_loom 4 eod_tp2_cp2 "${LOOM_SHAPE[@]}" --set parallel.tp=2 --set parallel.cp=2 --set train.micro_batch_size=4 \
  --set data.eod_mask_loss=true --set data.eod_id=10 || { cat "$WORK/eod_tp2_cp2.log"; fail "loom eod_tp2_cp2"; }

# against RUN REFERENCE: the largest relative difference of the 20 losses.
against() {
  "$PY" - "$WORK/$1/metrics.jsonl" "$WORK/$2.json" << 'PY'
import json, sys
loom = [json.loads(line)["loss"] for line in open(sys.argv[1]) if '"loss"' in line]
torch_losses = json.load(open(sys.argv[2]))["losses"]
assert len(loom) == len(torch_losses) == 20, (len(loom), len(torch_losses))
print(f"{max(abs(a - b) / max(1.0, abs(b)) for a, b in zip(loom, torch_losses)):.3e}")
PY
}
for run in dp4 tp2_pp2; do
  worst=$(against "$run" torch_ref)
  echo "loom at $run against PyTorch DDP (dp 4), 20 steps from the same weights and samples: losses within $worst"
  python3 -c "import sys; sys.exit(0 if float('$worst') <= 1e-5 else 1)" || fail "loom at $run differs from PyTorch by $worst"
done
worst=$(against eod_tp2_cp2 torch_eod)
echo "loom with data.eod_mask_loss at tp 2 x cp 2 against PyTorch's ignore_index (dp 4): losses within $worst"
python3 -c "import sys; sys.exit(0 if float('$worst') <= 1e-5 else 1)" || fail "loom's masked loss differs from PyTorch by $worst"
worst=$(against eod_tp2_cp2 torch_ref)
echo "the masked run against PyTorch unmasked: $worst"
# (loom and PyTorch agree within 1e-7 unmasked: 1e-4 apart is the mask's doing, whatever the README's text)
python3 -c "import sys; sys.exit(0 if float('$worst') > 1e-4 else 1)" || fail "the masked run trained as the unmasked one"
worst=$(against dp4 torch_no_clip)
echo "the same against PyTorch without clipping: $worst"
python3 -c "import sys; sys.exit(0 if float('$worst') > 1e-3 else 1)" || fail "PyTorch without clipping passed as loom's run"
echo "pytorch reference: ok"
