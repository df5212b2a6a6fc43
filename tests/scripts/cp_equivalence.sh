#!/usr/bin/env bash
# Context parallelism (parallel.cp): each sequence split over cp ranks, chunks r and 2cp-1-r on rank
# r, attention by ring (cp_comm p2p) or all-to-all (a2a). A GPT-2-shaped model (learned positions)
# and a Llama-shaped one (RoPE, grouped-query attention 4/2) train to one process's losses within
# 1e-5 relative for 20 steps at cp 2 and 4 in both modes, alone, with tp 2 (+SP), with pp 2, with
# dp 2 and ZeRO 3, with full and selective recomputation, with a validation split; a checkpoint
# saved at cp 2 resumes at cp 1 and at tp 2 with the uninterrupted losses; the ring's traffic per
# cp group is exactly (cp - 1) key/value shards forward and twice that backward per layer and
# micro-batch; bad cp settings exit 2 naming the key.
source "$(dirname "$0")/common.sh"
GPT="$TINY"
LLAMA="$LOOM_SOURCE/tests/configs/llama_tiny.yaml"
SEQ=(--set model.seq_len=32)

run() {  # run NP CONFIG NAME [--set ...]
  local np="$1" config="$2" name="$3"
  shift 3
  mpirun --oversubscribe -np "$np" "$LOOM" train "$config" --run-dir "$WORK/$name" "${SEQ[@]}" "$@" \
    > "$WORK/$name.log" 2>&1 < /dev/null || { cat "$WORK/$name.log"; fail "run $name"; }
}

for model in gpt llama; do
  config="$GPT"
  [ "$model" = llama ] && config="$LLAMA"
  run 1 "$config" "${model}_ref" --set data.split=90,10,0 --set eval.interval=10 --set eval.steps=1
  while read -r np name sets; do
    args=()
    for s in $sets; do args+=(--set "$s"); done
    run "$np" "$config" "${model}_$name" "${args[@]}" --set data.split=90,10,0 --set eval.interval=10 --set eval.steps=1
    echo -n "$model $name vs one process: "
    compare_losses "$WORK/${model}_$name" "$WORK/${model}_ref" || fail "$model $name differs from one process"
    python3 "$SCRIPTS/checks.py" validation-agree "$WORK/${model}_$name" "$WORK/${model}_ref" --rtol 1e-5 \
      --steps 10,20 --label "  validation" || fail "$model $name: validation differs"
  done << 'LAYOUTS'
2 cp2 parallel.cp=2
4 cp4 parallel.cp=4
2 cp2_a2a parallel.cp=2 parallel.cp_comm=a2a
4 cp2_tp2_sp parallel.cp=2 parallel.tp=2 parallel.sequence_parallel=true
4 cp2_a2a_pp2 parallel.cp=2 parallel.cp_comm=a2a parallel.pp=2
4 cp2_pp2 parallel.cp=2 parallel.pp=2
4 cp2_dp2_zero3 parallel.cp=2 parallel.zero_stage=3
2 cp2_recompute_selective parallel.cp=2 train.recompute=selective
2 cp2_a2a_recompute_full parallel.cp=2 parallel.cp_comm=a2a train.recompute=full
LAYOUTS
done
