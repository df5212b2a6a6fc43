#!/usr/bin/env bash
# Host memory of every rank over a long run (README, "Memory over weeks"): trains a tiny GPT for
# STEPS steps under mpirun with NP ranks and samples each rank's VmRSS every 5 s into
# OUT/rss.log (seconds, pid, kB), then prints each rank's first, second-minute and last sample.
#   bash bench/memory_over_steps.sh OUT NP STEPS [--set KEY=VALUE]...
# The README's two runs:
#   bash bench/memory_over_steps.sh /tmp/mem_dp 2 60000
#   bash bench/memory_over_steps.sh /tmp/mem_moe 4 20000 --set model.moe.num_experts=4 --set parallel.ep=2 \
#     --set parallel.pp=2 --set parallel.zero_stage=1 --set train.global_batch_size=8
set -euo pipefail
[ $# -ge 3 ] || { sed -n 2,9p "$0" >&2; exit 2; }
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$1" np="$2" steps="$3"
shift 3
mkdir -p "$out"
rm -rf "$out/run" "$out/ck"
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun -np "$np" --oversubscribe "$root/build/loom" train "$root/configs/gpt_tiny.yaml" --run-dir "$out/run" \
  --set model.num_layers=2 --set model.hidden_size=32 --set model.num_heads=2 --set model.seq_len=16 \
  --set train.global_batch_size=4 --set train.micro_batch_size=2 --set train.lr=0.001 --set train.steps="$steps" \
  --set log.interval=100 --set log.tensorboard=true --set eval.interval=500 --set eval.steps=2 \
  --set checkpoint.dir="$out/ck" --set checkpoint.interval=1000 --set checkpoint.async=true "$@" > "$out/train.log" 2>&1 &
launcher=$!
: > "$out/rss.log"
while kill -0 "$launcher" 2> /dev/null; do
  for pid in $(pgrep -P "$launcher" -x loom || true); do
    rss=$(awk '/VmRSS/{print $2}' "/proc/$pid/status" 2> /dev/null || true)
    [ -n "$rss" ] && echo "$(date +%s) $pid $rss" >> "$out/rss.log"
  done
  sleep 5
done
wait "$launcher" || { tail "$out/train.log"; exit 1; }
awk '{ if (!($2 in first)) { first[$2] = $3; t0[$2] = $1 } if ($1 - t0[$2] <= 120) minute[$2] = $3; last[$2] = $3 }
     END { for (p in first) printf "pid %s: first %d kB, at two minutes %d kB, last %d kB\n", p, first[p], minute[p], last[p] }' \
  "$out/rss.log"
