#!/usr/bin/env bash
# Mixture of Experts with expert parallelism, end to end (4 experts, top-2, in
# every block, auxiliary and z losses on):
# 1. without capacity limits, ep 2 and 4 at dp=4, alone, with tp=2 (with and
#    without sequence parallelism; ep 4 with it only), with pp=2 (ep 2), with zero_stage 1, 2 and 3 and with
#    full recomputation (which re-runs the dispatch in backward), give the
#    one-process losses within 1e-5 relative for 20 steps, or up to the first routing
#    near-tie where a token picks the other of two experts scored within ~1e-7 (one
#    choice moved; checks.py compare-metrics --routing-flips) (same micro-batch size:
#    the load-balancing loss is per micro-batch);
# 2. with capacity_factor 1.25, ep 1, 2 and 4 at dp=4 drop the same tokens (1468
#    choices in 20 steps) and give the same losses (README: why a near-tie of router
#    probabilities can still flip one drop between layouts that sum in another order);
# 3. metrics.jsonl has the MoE record each step: every token's k choices counted
#    per expert, the imbalance, and all-to-all bytes per rank that equal the
#    communication counters of the ep group;
# 4. a checkpoint saved at ep=2 resumes at ep=4 (experts are saved by global name);
# 5. DeepSeek-V3's router (sigmoid, groups, scaling, expert biases) at ep 2 x tp 2 equals one
#    process, and its biases are saved and resumed (at another ep);
# 6. a Llama with SwiGLU experts of their own width, a shared expert and dense blocks
#    (first_k_dense_replace, mlp_only_layers) at ep 2 x tp 2 x pp 2 and under ZeRO-3 equals one process;
# 7. DeepSeek-V3 in small (its router, latent attention, YaRN, multi-token prediction) likewise, with
#    the same expert biases after 20 steps;
# 8. expert tensor parallelism (parallel.expert_tp = tp: each expert's width split over tp): GPT's
#    experts at ep 2 x tp 2 with and without sequence parallelism and DeepSeek-V3 in small at
#    ep 2 x tp 2 x pp 2 + SP under zb-h1 equal one process; checkpoints move between split and whole
#    experts (saved at expert_tp 2, resumed at ep 4 without it, and the other way).
source "$(dirname "$0")/common.sh"
MOE=(--set model.moe.num_experts=4 --set model.moe.top_k=2 --set model.moe.aux_loss_coeff=0.01
     --set model.moe.z_loss_coeff=0.001 --set train.global_batch_size=16 --set train.micro_batch_size=2)
# The layouts' runs start from a seed whose one-process run has no routing near-tie in 20 steps
# with this build's arithmetic (the default seed's has one at step 4, which ~1e-7 flips for most
# layouts; compare_moe_losses would then check only the 3 steps before it).
SEED=(--set train.seed=4321)

# Losses within 1e-5 up to the first routing near-tie, if any (checks.py compare-metrics).
compare_moe_losses() {
  python3 "$SCRIPTS/checks.py" compare-metrics "$1/metrics.jsonl" "$2/metrics.jsonl" --rtol 1e-5 --routing-flips
}

train() {  # train NP NAME [--set ...]
  run_loom "$1" "$2" "${MOE[@]}" "${@:3}" || { cat "$WORK/$2.log"; fail "$2 failed"; }
}

train 1 ref "${SEED[@]}"
# At ep 4 the 8-rank layouts are tp 2 with SP only: ep 2 runs tp 2 without it and pp 2, and an
# 8-rank run costs about two 4-rank ones here.
for ep in 2 4; do
  layouts=(dp4 tp2_sp zero1 zero2 zero3 recompute)
  [ "$ep" = 2 ] && layouts+=(tp2 pp2)
  train 4 "ep${ep}_dp4" "${SEED[@]}" --set parallel.ep="$ep"
  [ "$ep" = 2 ] && train 8 "ep${ep}_tp2" "${SEED[@]}" --set parallel.ep="$ep" --set parallel.tp=2
  train 8 "ep${ep}_tp2_sp" "${SEED[@]}" --set parallel.ep="$ep" --set parallel.tp=2 --set parallel.sequence_parallel=true
  [ "$ep" = 2 ] && train 8 "ep${ep}_pp2" "${SEED[@]}" --set parallel.ep="$ep" --set parallel.pp=2
  train 4 "ep${ep}_zero1" "${SEED[@]}" --set parallel.ep="$ep" --set parallel.zero_stage=1
  train 4 "ep${ep}_zero2" "${SEED[@]}" --set parallel.ep="$ep" --set parallel.zero_stage=2
  train 4 "ep${ep}_zero3" "${SEED[@]}" --set parallel.ep="$ep" --set parallel.zero_stage=3
  train 4 "ep${ep}_recompute" "${SEED[@]}" --set parallel.ep="$ep" --set train.recompute=full
  for layout in "${layouts[@]}"; do
    echo -n "ep=$ep $layout vs one process: "
    compare_moe_losses "$WORK/ep${ep}_$layout" "$WORK/ref" || fail "ep=$ep $layout differs from one process"
  done
done
# MoE in one block of four (every=4) at pp=2: the first stage has no expert, also under ZeRO-3
# (whose expert units are then empty on that stage).
EVERY4=(--set model.num_layers=4 --set model.moe.every=4)
train 1 ref_every4 "${SEED[@]}" "${EVERY4[@]}"
train 8 ep2_pp2_zero3_every4 "${SEED[@]}" "${EVERY4[@]}" --set parallel.ep=2 --set parallel.pp=2 --set parallel.zero_stage=3
echo -n "every=4, ep=2 pp=2 zero_stage 3 vs one process: "
compare_moe_losses "$WORK/ep2_pp2_zero3_every4" "$WORK/ref_every4" || fail "every=4 pp=2 zero3 differs from one process"

# The comparison can fail: without the auxiliary losses the run differs.
train 4 no_aux "${SEED[@]}" --set parallel.ep=2 --set model.moe.aux_loss_coeff=0 --set model.moe.z_loss_coeff=0
if compare_losses "$WORK/no_aux" "$WORK/ref" > /dev/null; then fail "a run without auxiliary losses passed the comparison"; fi
if compare_moe_losses "$WORK/no_aux" "$WORK/ref" > /dev/null; then fail "a run without auxiliary losses passed as a near-tie"; fi

for ep in 1 2 4; do
  train 4 "capacity_ep$ep" --set parallel.ep="$ep" --set model.moe.capacity_factor=1.25
done
for ep in 2 4; do
  echo -n "capacity 1.25, ep=$ep vs ep=1 (dp=4): "
  compare_losses "$WORK/capacity_ep$ep" "$WORK/capacity_ep1" || fail "capacity: ep=$ep differs from ep=1"
done

# Every step counts 16 sequences x 32 tokens x 2 choices per MoE layer (2 layers), before dropping;
# the same tokens are dropped at every ep with a finite capacity, and some are; all-to-all bytes in
# the metrics, summed over the steps, equal each rank's ep counters.
python3 "$SCRIPTS/checks.py" moe-routing "$WORK"/{ref,ep2_dp4,ep4_tp2_sp,ep2_pp2} --tokens $((16 * 32 * 2)) || fail "MoE metrics"
python3 "$SCRIPTS/checks.py" moe-drops "$WORK"/capacity_ep{1,2,4} || fail "MoE metrics"
for run in "ep2_dp4 4" "ep4_dp4 4" "ep4_tp2_sp 8"; do
  set -- $run
  python3 "$SCRIPTS/checks.py" moe-all-to-all "$WORK/$1" --np "$2" || fail "MoE metrics"
done

# Saved at ep=2 (step 10), resumed at ep=4: steps 11-20 equal the uninterrupted run.
train 4 save_ep2 --set parallel.ep=2 --set checkpoint.dir="$WORK/ck" --set checkpoint.interval=10
train 4 resume_ep4 --set parallel.ep=4 --resume "$WORK/ck/step_00000010"
compare_resumed "$WORK/resume_ep4" "$WORK/save_ep2" 11 20 "saved at ep=2, resumed at ep=4" || fail "resume at ep=4 differs"
# DeepSeek-V3's router: sigmoid scores, 8 experts in 4 groups of 2 (the best 2 groups eligible), scaled
# weights, and expert biases moved after every step by the global loads. ep 2 x tp 2 x dp 4 gives
# one process's losses; saved at ep 2 (step 10: the manifest holds ten updates), resumed at ep 4,
# steps 11-20 equal the uninterrupted run (the biases resumed with it).
DS=(--set model.moe.num_experts=8 --set model.moe.score=sigmoid --set model.moe.n_group=4 --set model.moe.topk_group=2
    --set model.moe.routed_scaling_factor=2.5 --set model.moe.bias_update_rate=0.01 "${SEED[@]}")
train 1 ds_ref "${DS[@]}"
train 8 ds_ep2_tp2 "${DS[@]}" --set parallel.ep=2 --set parallel.tp=2
echo -n "DeepSeek-V3 router, ep=2 tp=2 vs one process: "
compare_moe_losses "$WORK/ds_ep2_tp2" "$WORK/ds_ref" || fail "DeepSeek-V3 router at ep=2 tp=2 differs from one process"
train 4 ds_save "${DS[@]}" --set parallel.ep=2 --set checkpoint.dir="$WORK/ck_ds" --set checkpoint.interval=10
python3 - "$WORK/ck_ds/step_00000010/manifest.json" << 'PY' || fail "the step-10 checkpoint's expert biases"
import json, sys
bias = json.load(open(sys.argv[1]))["expert_bias"]
assert len(bias) == 2 and all(len(layer) == 8 for layer in bias), bias
# Each of ten updates moves a bias by +-0.01 or 0: multiples of 0.01 within +-0.1, not all zero.
for layer in bias:
    for b in layer:
        k = round(b / 0.01)
        assert abs(b - 0.01 * k) < 1e-9 and abs(k) <= 10, bias
assert any(abs(b) > 1e-12 for layer in bias for b in layer), bias
print("expert biases at step 10:", bias)
PY
train 4 ds_resume_ep4 "${DS[@]}" --set parallel.ep=4 --resume "$WORK/ck_ds/step_00000010"
compare_resumed "$WORK/ds_resume_ep4" "$WORK/ds_save" 11 20 "DeepSeek-V3 router saved at ep=2, resumed at ep=4" ||
  fail "DeepSeek-V3 router resumed at ep=4 differs"
# The experts of Qwen3-MoE and DeepSeek-V3 in a Llama: SwiGLU experts of their own width (24), one
# shared expert beside them, block 0 dense (first_k_dense_replace) and block 2 dense (mlp_only_layers):
# ep 2 x tp 2 x pp 2 and ep 2 under ZeRO-3 give one process's losses.
SWIGLU=(--set model.arch=llama --set model.num_kv_heads=2 --set model.ffn_hidden_size=64 --set model.num_layers=4
        --set model.moe.moe_intermediate_size=24 --set model.moe.n_shared_experts=1
        --set model.moe.first_k_dense_replace=1 --set model.moe.mlp_only_layers=2 "${SEED[@]}")
train 1 swiglu_ref "${SWIGLU[@]}"
train 8 swiglu_ep2_tp2_pp2 "${SWIGLU[@]}" --set parallel.ep=2 --set parallel.tp=2 --set parallel.pp=2
train 4 swiglu_ep2_zero3 "${SWIGLU[@]}" --set parallel.ep=2 --set parallel.zero_stage=3
for layout in ep2_tp2_pp2 ep2_zero3; do
  echo -n "SwiGLU and shared experts, dense blocks 0 and 2, $layout vs one process: "
  compare_moe_losses "$WORK/swiglu_$layout" "$WORK/swiglu_ref" || fail "SwiGLU experts at $layout differ from one process"
done
# 7. A DeepSeek-V3 in small: the experts above with DeepSeek-V3's router (its biases moving every step),
# latent attention (query latent, values narrower than keys), interleaved rotary features under
# YaRN, and one multi-token prediction module (an MoE block of its own): ep 2 x tp 2 x pp 2 + SP
# under zb-h1, ep 2 under ZeRO-3 and cp 2 x ep 2 (the MTP labels gathered over cp) give one
# process's losses and mtp_loss over 20 steps, and the
# same expert biases after them (every MoE block's, the MTP block's included).
DSV3=("${SWIGLU[@]}" --set model.num_kv_heads=0 --set model.moe.num_experts=8 --set model.moe.score=sigmoid
      --set model.moe.n_group=4 --set model.moe.topk_group=2 --set model.moe.routed_scaling_factor=2.5
      --set model.moe.bias_update_rate=0.01 --set model.mla.kv_lora_rank=16 --set model.mla.q_lora_rank=24
      --set model.mla.qk_nope_head_dim=8 --set model.mla.qk_rope_head_dim=4 --set model.mla.v_head_dim=6
      --set model.rope_interleave=true --set model.rope_scaling.type=yarn --set model.rope_scaling.factor=4
      --set model.rope_scaling.original_max_position_embeddings=8 --set model.rope_scaling.mscale_all_dim=1
      --set model.mtp.depth=1 --set model.mtp.loss_weight=0.3 --set checkpoint.interval=20)
train 1 dsv3_ref "${DSV3[@]}" --set checkpoint.dir="$WORK/ck_dsv3_ref"
train 8 dsv3_ep2_tp2_pp2 "${DSV3[@]}" --set parallel.ep=2 --set parallel.tp=2 --set parallel.pp=2 \
  --set parallel.sequence_parallel=true --set parallel.schedule=zb-h1 --set checkpoint.dir="$WORK/ck_dsv3_tp"
train 4 dsv3_ep2_zero3 "${DSV3[@]}" --set parallel.ep=2 --set parallel.zero_stage=3 --set checkpoint.dir="$WORK/ck_dsv3_z3"
train 8 dsv3_cp2_ep2 "${DSV3[@]}" --set parallel.cp=2 --set parallel.ep=2 --set checkpoint.dir="$WORK/ck_dsv3_cp"
# 8. The same at expert_tp 2: each expert's width split over tp, every tp rank routing the whole sequence.
train 8 dsv3_etp_ep2_tp2_pp2 "${DSV3[@]}" --set parallel.ep=2 --set parallel.tp=2 --set parallel.pp=2 \
  --set parallel.sequence_parallel=true --set parallel.schedule=zb-h1 --set parallel.expert_tp=2 \
  --set checkpoint.dir="$WORK/ck_dsv3_etp"
for layout in ep2_tp2_pp2 ep2_zero3 cp2_ep2 etp_ep2_tp2_pp2; do
  echo -n "DeepSeek-V3 in small, $layout vs one process: "
  compare_moe_losses "$WORK/dsv3_$layout" "$WORK/dsv3_ref" || fail "DeepSeek-V3 in small at $layout differs from one process"
done
python3 - "$WORK" << 'PY' || fail "DeepSeek-V3 in small: mtp_loss or expert biases differ between layouts"
import json, sys
work = sys.argv[1]
def mtp(run):
    return [r["mtp_loss"] for r in map(json.loads, open(f"{work}/{run}/metrics.jsonl")) if "mtp_loss" in r]
def bias(ck):
    return json.load(open(f"{work}/{ck}/step_00000020/manifest.json"))["expert_bias"]
ref = mtp("dsv3_ref")
assert len(ref) == 20, ref
for run, ck in (("dsv3_ep2_tp2_pp2", "ck_dsv3_tp"), ("dsv3_ep2_zero3", "ck_dsv3_z3"), ("dsv3_cp2_ep2", "ck_dsv3_cp"),
                ("dsv3_etp_ep2_tp2_pp2", "ck_dsv3_etp")):
    worst = max(abs(a - b) / max(1.0, abs(b)) for a, b in zip(mtp(run), ref))
    assert len(mtp(run)) == 20 and worst <= 1e-5, (run, worst)
    assert bias(ck) == bias("ck_dsv3_ref"), (run, bias(ck), bias("ck_dsv3_ref"))
    print(f"{run}: mtp_loss within {worst:.1e} of one process over 20 steps; the expert biases of its",
          f"{len(bias(ck))} MoE blocks equal one process's")
PY
# 8. GPT's experts (GELU, proj's bias added once after the sum over tp) split over tp at ep 2 x tp 2,
# with and without sequence parallelism; the first saves at step 10 and resumes at ep 4 with whole
# experts, and the ep-2 checkpoint of whole experts (section 4) resumes split.
train 8 etp_ep2_tp2 "${SEED[@]}" --set parallel.ep=2 --set parallel.tp=2 --set parallel.expert_tp=2 \
  --set checkpoint.dir="$WORK/ck_etp" --set checkpoint.interval=10
train 8 etp_ep2_tp2_sp "${SEED[@]}" --set parallel.ep=2 --set parallel.tp=2 --set parallel.expert_tp=2 \
  --set parallel.sequence_parallel=true
for layout in ep2_tp2 ep2_tp2_sp; do
  echo -n "expert_tp 2, $layout vs one process: "
  compare_moe_losses "$WORK/etp_$layout" "$WORK/ref" || fail "expert_tp 2 at $layout differs from one process"
done
train 4 etp_resume_ep4 "${SEED[@]}" --set parallel.ep=4 --resume "$WORK/ck_etp/step_00000010"
compare_resumed "$WORK/etp_resume_ep4" "$WORK/etp_ep2_tp2" 11 20 "saved at expert_tp 2, resumed whole at ep=4" ||
  fail "resume of split experts at ep=4 differs"
train 8 resume_etp --set parallel.ep=2 --set parallel.tp=2 --set parallel.expert_tp=2 --resume "$WORK/ck/step_00000010"
compare_resumed "$WORK/resume_etp" "$WORK/save_ep2" 11 20 "saved whole at ep=2, resumed at expert_tp 2" ||
  fail "resume of whole experts at expert_tp 2 differs"
code=0
"$LOOM" export "$WORK/ck/step_00000020" --format hf-gpt2 --output "$WORK/moe.safetensors" > "$WORK/export.log" 2>&1 || code=$?
[ "$code" = 2 ] && grep -q "cannot represent model.moe.num_experts = 4" "$WORK/export.log" || { cat "$WORK/export.log"; fail "export of an MoE checkpoint was not refused with exit 2"; }
echo "moe equivalence: ok"
