#!/usr/bin/env bash
# loom verify (launch/verify.cpp), end to end on the tiny model:
# 1. equal (exit 0, the verdict the last line of standard output) on the layouts the equivalence
#    tests check: tp 2 with and without SP, pp 2 (1f1b, interleaved, zb-h1), cp 2 (ring and
#    all-to-all), dp 4 under ZeRO 1, 2 and 3, full recomputation, a Llama with GQA at tp 2 x pp 2,
#    an MoE at ep 2 x tp 2 with its experts split over tp, bf16 at tp 2 (its looser tolerance stated),
#    and under torchrun;
# 2. with a planted fault of 1e-3 (--inject-fault RANK:1:scale:GROUP:1e-3) in one tp all-reduce, one
#    dp gradient bucket (also in an MoE at ep 2) and one pipeline send, it exits 4 and its verdict names a parameter split
#    over (or replicated on) the faulty dimension and suspects that dimension, and only dimensions
#    the layout has;
# 3. bad input exits 2 naming the flag or key.
source "$(dirname "$0")/common.sh"

# verify NAME NP [args...]: loom verify on the tiny config under mpirun into $WORK/NAME; its output
# in $WORK/NAME.out, its exit code in CODE.
verify() {
  local name="$1" np="$2"
  shift 2
  CODE=0
  mpirun -np "$np" "$LOOM" verify "$TINY" --run-dir "$WORK/$name" "$@" > "$WORK/$name.out" 2>&1 || CODE=$?
  VERDICT="$(grep '^verdict:' "$WORK/$name.out" | tail -1)"
}

expect_equal() {  # expect_equal NAME NP [args...]
  verify "$@"
  [ "$CODE" = 0 ] && [[ "$VERDICT" == "verdict: equal within "* ]] ||
    { tail -30 "$WORK/$1.out"; fail "loom verify $1: exit $CODE, '$VERDICT'"; }
  echo "$1: $VERDICT"
}

expect_equal tp2 4 --set parallel.tp=2
expect_equal tp2_sp 4 --set parallel.tp=2 --set parallel.sequence_parallel=true
expect_equal pp2 4 --set parallel.pp=2
expect_equal pp2_interleaved 2 --set parallel.pp=2 --set model.num_layers=4 --set parallel.virtual_stages=2 \
  --set parallel.schedule=interleaved
expect_equal pp2_zb 2 --set parallel.pp=2 --set parallel.schedule=zb-h1
expect_equal cp2_ring 2 --set parallel.cp=2
expect_equal cp2_a2a 4 --set parallel.cp=2 --set parallel.cp_comm=a2a --set parallel.tp=2
for stage in 1 2 3; do
  expect_equal "dp4_zero$stage" 4 --set parallel.zero_stage="$stage"
done
expect_equal recompute 4 --set parallel.tp=2 --set train.recompute=full
expect_equal llama_tp2_pp2 4 --set model.arch=llama --set model.num_kv_heads=2 --set model.ffn_hidden_size=64 \
  --set parallel.tp=2 --set parallel.pp=2
expect_equal moe_ep2_tp2 8 --set model.moe.num_experts=4 --set model.moe.top_k=2 --set parallel.ep=2 \
  --set parallel.tp=2 --set parallel.expert_tp=2 --set train.seed=4321
# The router's noise is drawn per rank, as dropout's masks are: verified without it, and said (it
# once gave exit 4 blaming the pp collectives). Capacity under cp drops by each rank's part of the
# sequence: refused, naming the key (it once blamed the cp collectives).
expect_equal moe_jitter_pp2 2 --set model.moe.num_experts=4 --set model.moe.router_jitter=0.3 --set parallel.pp=2 \
  --set train.seed=4321
grep -q "both runs train with model.moe.router_jitter = 0 (the config's 0.3)" "$WORK/moe_jitter_pp2.out" ||
  fail "the router's jitter was not said"
expect_exit 2 "config key 'model.moe.capacity_factor' is 1.0* under cp" mpirun -np 2 "$LOOM" verify "$TINY" \
  --run-dir "$WORK/moe_capacity_cp2" --set model.moe.num_experts=4 --set model.moe.capacity_factor=1.0 --set parallel.cp=2
expect_equal bf16_tp2 2 --set parallel.tp=2 --set train.precision=bf16
# A config that saves checkpoints, decays wsd over more steps than verify trains, and has dropout:
# verified without checkpoints (its checkpoint.dir untouched), the schedule fitted, dropout off.
expect_equal user_keys 2 --set model.dropout=0.1 --set checkpoint.dir="$WORK/ck_user" --set checkpoint.interval=2 \
  --set train.lr_decay_style=wsd --set train.lr_wsd_decay_steps=4
grep -q "both runs train with model.dropout = 0 (the config's 0.1)" "$WORK/user_keys.out" || fail "dropout was not said"
[ ! -e "$WORK/ck_user" ] || fail "verify wrote into the config's checkpoint.dir"
grep -q "relative (bf16)" "$WORK/bf16_tp2.out" || fail "the bf16 verdict does not state its tolerance's origin"
# The verdict is the last line of standard output; the reference's log is kept beside the runs.
[ "$(tail -1 "$WORK/tp2.out")" = "$(grep '^verdict:' "$WORK/tp2.out")" ] || fail "the verdict is not the last line"
[ -s "$WORK/tp2/reference.log" ] && [ -s "$WORK/tp2/layout/metrics.jsonl" ] || fail "verify's runs are missing"
# Under torchrun too.
CODE=0
torchrun --nproc_per_node 2 --master_port "$(free_port)" --no_python "$LOOM" verify "$TINY" \
  --run-dir "$WORK/torchrun" --set parallel.tp=2 > "$WORK/torchrun.out" 2>&1 || CODE=$?
[ "$CODE" = 0 ] && grep -q '^verdict: equal' "$WORK/torchrun.out" || { tail -20 "$WORK/torchrun.out"; fail "torchrun"; }
echo "torchrun tp2: $(grep '^verdict:' "$WORK/torchrun.out")"

# expect_fault NAME NP DIMENSION PATTERN [args...]: exit 4, the verdict suspects DIMENSION and names
# a parameter whose place matches PATTERN; no dimension the layout lacks is named.
expect_fault() {
  local name="$1" np="$2" dim="$3" pattern="$4"
  shift 4
  verify "$name" "$np" "$@"
  [ "$CODE" = 4 ] || { tail -30 "$WORK/$name.out"; fail "$name: exit $CODE, not 4"; }
  [[ "$VERDICT" == "verdict: differs from step 1"* ]] || fail "$name: '$VERDICT'"
  [[ "$VERDICT" =~ suspect\ the\ $dim ]] || fail "$name: the verdict does not suspect $dim: '$VERDICT'"
  [[ "$VERDICT" =~ $pattern ]] || fail "$name: the verdict names no parameter $pattern: '$VERDICT'"
  echo "$name: $VERDICT"
}
expect_fault tp_fault 4 tp "column-split over tp|row-split over tp" --set parallel.tp=2 --inject-fault 1:1:scale:tp:1e-3
expect_fault tp_sp_fault 4 tp "split over tp" --set parallel.tp=2 --set parallel.sequence_parallel=true \
  --inject-fault 1:1:scale:tp:1e-3
expect_fault dp_fault 4 dp "replicated over dp" --set parallel.tp=2 --inject-fault 1:1:scale:dp:1e-3
# The dense parameters' dp replicas sit at every ep coordinate: still dp replicas.
expect_fault moe_dp_fault 4 dp "replicated over (expert-)?dp" --set model.moe.num_experts=4 --set model.moe.top_k=2 \
  --set parallel.ep=2 --set train.seed=4321 --inject-fault 1:1:scale:dp:1e-3
expect_fault pp_fault 4 "pipeline send" "stage 0" --set parallel.pp=2 --inject-fault 0:1:scale:pp:1e-3
# Only the layout's dimensions: no tp, cp or ep in a pp x dp layout's verdict.
[[ "$VERDICT" != *" tp"* && "$VERDICT" != *" cp"* && "$VERDICT" != *" ep"* ]] ||
  fail "pp_fault names a dimension the layout lacks: '$VERDICT'"
# Without the fault the same layouts are equal (the fault, not the layout, made the difference): tp2, pp2 above.

expect_exit 2 "--steps expects an integer of at least 1" "$LOOM" verify "$TINY" --steps 0
expect_exit 2 "--rtol expects a finite tolerance of at least 0" "$LOOM" verify "$TINY" --rtol -1
expect_exit 2 "unknown key 'train.stepz'" "$LOOM" verify "$TINY" --set train.stepz=3
expect_exit 2 "this layout has no pp group" "$LOOM" verify "$TINY" --inject-fault 0:1:scale:pp:1e-3
# A directory of an earlier verify at another world: its leftover rank files are not read.
verify tp2 2 --set parallel.tp=2
[ "$CODE" = 0 ] || { tail -20 "$WORK/tp2.out"; fail "verify at world 2 in the directory of a world-4 verify: exit $CODE"; }
echo "verify: ok"
