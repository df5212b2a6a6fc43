#!/usr/bin/env bash
# The outside reference for bench/compression.sh's PowerSGD figures: PyTorch's own PowerSGD (the DDP
# comm hook, torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook) on the same shape of run:
# bench/reference_gpt.py's GPT at configs/gpt_tiny.yaml's shape (4 layers, hidden 128, 4 heads,
# seq 64, vocab 257), dp 4 over gloo under torchrun, global batch 16 in micro-batches of 4, 300
# steps at loom's schedule (lr 0.003 to 0.0003, 20 warm-up steps), on the same texts (random
# windows of the token stream of bench/compression.sh's dataset: CORPUS licenses or info, as
# there). Per seed: plain all-reduce, PowerSGD rank 4 from iteration 10 with error feedback and
# without, and rank 8. Prints each run's mean loss over its last 50 steps and its ratio to the
# plain run's at the same seed.
#   bash bench/compression.sh first (it prepares OUT/CORPUS), then
#   bash bench/compression_pytorch.sh [OUT_DIR]    # about 1 minute a run on 2 cores
set -euo pipefail
cd "$(dirname "$0")/.."
CORPUS="${CORPUS:-licenses}"
OUT="${1:-/tmp/loom-compression$([ "$CORPUS" = licenses ] || echo "-$CORPUS")}"
[ -f "$OUT/$CORPUS.bin" ] || { echo "no $OUT/$CORPUS.bin: run CORPUS=$CORPUS bash bench/compression.sh $OUT first" >&2; exit 2; }
SEEDS="${SEEDS:-1234 7 99}"
SHAPE=(--layers 4 --hidden 128 --heads 4 --seq-len 64 --vocab 257 --global-batch 16 --micro-batch 4 --steps 300
  --lr 0.003 --min-lr 0.0003 --lr-warmup-steps 20 --data "$OUT/$CORPUS")
run() {  # run NAME SEED [args...]
  local name="$1" seed="$2"
  shift 2
  # PyTorch 2.11's workers with the PowerSGD hook abort at exit ("terminate called without an
  # active exception") after the result is printed: the result line is what counts.
  OMP_NUM_THREADS=1 .venv/bin/torchrun --nproc_per_node 4 bench/reference_gpt.py "${SHAPE[@]}" --seed "$seed" "$@" \
    2> "$OUT/pytorch_${name}_$seed.err" | grep '^{"side"' > "$OUT/pytorch_${name}_$seed.json" || true
  [ -s "$OUT/pytorch_${name}_$seed.json" ] || { tail -20 "$OUT/pytorch_${name}_$seed.err"; exit 1; }
}
for seed in $SEEDS; do
  run none "$seed"
  run powersgd "$seed" --powersgd-rank 4 --powersgd-start 10
  run powersgd_no_feedback "$seed" --powersgd-rank 4 --powersgd-start 10 --no-error-feedback
  run powersgd_rank8 "$seed" --powersgd-rank 8 --powersgd-start 10
done
python3 - "$OUT" $SEEDS << 'PY'
import json, sys
out, seeds = sys.argv[1], sys.argv[2:]
def last(name, seed):
    losses = json.load(open(f"{out}/pytorch_{name}_{seed}.json"))["losses"][-50:]
    return sum(losses) / len(losses)
print(f"{'PyTorch run':<22} " + " ".join(f"{'seed ' + s:>16}" for s in seeds) + f" {'mean ratio':>11}")
for name in ["none", "powersgd", "powersgd_no_feedback", "powersgd_rank8"]:
    cells, ratios = [], []
    for s in seeds:
        value, base = last(name, s), last("none", s)
        ratios.append(value / base)
        cells.append(f"{value:.4f} ({value / base:.3f})")
    print(f"{name:<22} " + " ".join(f"{c:>16}" for c in cells) + f" {sum(ratios) / len(ratios):>10.3f}x")
PY
