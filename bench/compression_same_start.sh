#!/usr/bin/env bash
# loom's PowerSGD and PyTorch's own (DDP's powerSGD_hook) from the same start: the same initial
# weights and loom's samples in loom's order on both sides (bench/reference_gpt.py --loom-order), so
# that the two sides' uncompressed runs train the same losses (within 1e-7 over 20 steps, as
# tests/scripts/pytorch_reference.sh checks, until float rounding's chaos parts them). INIT=loom (the
# default): loom's own initial weights (configs/gpt_tiny.yaml's, saved at train.exit_after 0 and
# exported with --format hf-gpt2) read by the reference (--init-from); INIT=pytorch: the reference's
# (normal 0.02 everywhere, no scaled residual projections) written for model.init_from. Per seed:
# uncompressed and PowerSGD rank 4 from step 10 on each side, dp 4, 300 steps on the GNU manuals
# (bench/compression.sh's CORPUS=info dataset, made here if missing). Prints each run's mean loss over
# its last 50 steps and its ratio to the same side's uncompressed run.
#   bash bench/compression_same_start.sh [OUT_DIR]     # about 8 minutes a seed on 2 cores
set -euo pipefail
cd "$(dirname "$0")/.."
INIT="${INIT:-loom}"
OUT="${1:-/tmp/loom-compression-same-start-$INIT}"
LOOM="${LOOM:-build/loom}"
PY="${PY:-.venv/bin/python}"
SEEDS="${SEEDS:-1234 7 99}"
RANK="${RANK_PSGD:-4}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
mkdir -p "$OUT"
if [ ! -f "$OUT/info.bin" ]; then
  mkdir -p "$OUT/info_text"
  for f in /usr/share/info/*.gz; do zcat "$f" > "$OUT/info_text/$(basename "$f" .gz).txt"; done
  "$LOOM" prepare --input "$OUT"/info_text/*.txt --output "$OUT/info" --tokenizer byte --split-paragraphs --append-eod
fi
pytorch() {  # pytorch NAME SEED [args...]
  local name="$1" seed="$2"
  shift 2
  "$PY" -m torch.distributed.run --nproc_per_node 4 bench/reference_gpt.py --layers 4 --hidden 128 --heads 4 \
    --seq-len 64 --vocab 257 --global-batch 16 --micro-batch 4 --steps 300 --lr 0.003 --min-lr 0.0003 \
    --lr-warmup-steps 20 --data "$OUT/info" --seed "$seed" --loom-order "$@" \
    2> "$OUT/torch_${name}_$seed.err" | grep '^{"side"' > "$OUT/torch_${name}_$seed.json" || true
  [ -s "$OUT/torch_${name}_$seed.json" ] || { tail -20 "$OUT/torch_${name}_$seed.err"; exit 1; }
}
loom() {  # loom NAME SEED [--set ...]
  local name="$1" seed="$2"
  shift 2
  rm -rf "${OUT:?}/loom_${name}_$seed"
  mpirun --oversubscribe -np 4 "$LOOM" train configs/gpt_tiny.yaml --run-dir "$OUT/loom_${name}_$seed" \
    --set data.path="$OUT/info" --set model.vocab_size=257 --set train.steps=300 --set data.order=shuffled \
    --set train.micro_batch_size=4 --set log.interval=50 --set train.seed="$seed" \
    --set model.init_from="$OUT/init_$seed.safetensors" "$@" > "$OUT/loom_${name}_$seed.log" 2>&1 ||
    { tail -20 "$OUT/loom_${name}_$seed.log"; exit 1; }
}
for seed in $SEEDS; do
  case $INIT in
    loom)
      rm -rf "$OUT/init_run_$seed" "$OUT/init_ck_$seed" "$OUT/init_hf_$seed"
      "$LOOM" train configs/gpt_tiny.yaml --run-dir "$OUT/init_run_$seed" --set model.vocab_size=257 \
        --set train.seed="$seed" --set data.path="$OUT/info" --set checkpoint.dir="$OUT/init_ck_$seed" --set train.exit_after=0 > /dev/null
      "$LOOM" export "$OUT/init_ck_$seed/step_00000000" --format hf-gpt2 --output "$OUT/init_hf_$seed" > /dev/null
      cp "$OUT/init_hf_$seed/model.safetensors" "$OUT/init_$seed.safetensors"
      pytorch none "$seed" --init-from "$OUT/init_$seed.safetensors" ;;
    pytorch) pytorch none "$seed" --save-init "$OUT/init_$seed.safetensors" ;;
    *) echo "INIT must be loom or pytorch, not '$INIT'" >&2; exit 2 ;;
  esac
  pytorch powersgd "$seed" --init-from "$OUT/init_$seed.safetensors" --powersgd-rank "$RANK" --powersgd-start 10
  loom none "$seed"
  loom powersgd "$seed" --set parallel.grad_compression=powersgd --set parallel.powersgd.rank="$RANK" \
    --set parallel.powersgd.start_step=10
done
python3 - "$OUT" $SEEDS << 'PY'
import json, sys
out, seeds = sys.argv[1], sys.argv[2:]
def last50(side, name, seed):
    if side == "torch":
        losses = json.load(open(f"{out}/torch_{name}_{seed}.json"))["losses"]
    else:
        losses = [json.loads(l)["loss"] for l in open(f"{out}/loom_{name}_{seed}/metrics.jsonl") if '"loss"' in l]
    return sum(losses[-50:]) / 50
print(f"{'run':<18} " + " ".join(f"{'seed ' + s:>18}" for s in seeds) + f" {'mean ratio':>11}")
for side in ("torch", "loom"):
    for name in ("none", "powersgd"):
        cells, ratios = [], []
        for s in seeds:
            value, base = last50(side, name, s), last50(side, "none", s)
            ratios.append(value / base)
            cells.append(f"{value:.4f} ({value / base:.4f}x)")
        print(f"{side + ' ' + name:<18} " + " ".join(f"{c:>18}" for c in cells) + f" {sum(ratios) / len(ratios):>10.4f}x")
PY
