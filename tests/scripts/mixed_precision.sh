#!/usr/bin/env bash
# Mixed precision (train.precision bf16 and fp16) trains on CPU:
# - bf16 in one process and at tp=2 pp=2 with sequence parallelism, and at
#   dp=4 with ZeRO-2 reducing gradients in bf16: the loss falls, and the
#   layouts end near the one-process run (bf16 rounds differently per layout,
#   so this is a sanity bound, not the fp32 equivalence the other tests hold);
#   the traffic counters equal `loom plan --run`'s prediction (bf16
#   activations, bf16 gradient reduction);
# - the memory report shows bf16 parameters (2N), fp32 gradients (4N) and
#   fp32 master weights (4N) beside the Adam moments (8N, or 8N/d with ZeRO);
# - fp16 with an overflow injected at step 3: that step is skipped (the
#   checkpoints of steps 2 and 3 hold the same weights and moments), the
#   loss scale halves, no other step is skipped, the loss falls, and a run
#   resumed after step 5 continues with the same scale and losses;
# - bad input exits 2.
source "$(dirname "$0")/common.sh"

run_loom 1 fp32 || { cat "$WORK/fp32.log"; fail "fp32 run"; }
run_loom 1 bf16 --set train.precision=bf16 || { cat "$WORK/bf16.log"; fail "bf16 run"; }
run_loom 4 bf16_tp2pp2sp --set train.precision=bf16 --set parallel.tp=2 --set parallel.pp=2 \
  --set parallel.sequence_parallel=true || { cat "$WORK/bf16_tp2pp2sp.log"; fail "bf16 tp2 pp2 run"; }
run_loom 4 bf16_dp4z2 --set train.precision=bf16 --set parallel.zero_stage=2 --set parallel.grad_reduce_dtype=bf16 ||
  { cat "$WORK/bf16_dp4z2.log"; fail "bf16 dp4 zero2 run"; }
for run in bf16_tp2pp2sp bf16_dp4z2; do
  "$LOOM" plan --run "$WORK/$run" | grep -q "every rank's predicted traffic equals the counters" || fail "$run traffic"
done
python3 - "$WORK" << 'PY' || fail "bf16 runs"
import json, sys
work = sys.argv[1]
def records(run):
    return [json.loads(line) for line in open(f"{work}/{run}/metrics.jsonl")]
fp32, bf16 = records("fp32"), records("bf16")
n = fp32[0]["memory"][0]["params_bytes"] // 4
for run, d in [("bf16", 1), ("bf16_dp4z2", 4)]:
    for rank in records(run)[0]["memory"]:
        assert rank["params_bytes"] == 2 * n, (run, rank, n)
        assert rank["master_bytes"] == 4 * n, (run, rank, n)
        assert rank["grads_bytes"] == 4 * n, (run, rank, n)
        assert abs(rank["optimizer_bytes"] - 8 * n / d) <= 8 * d, (run, rank, n)
print(f"memory per rank, N = {n}: bf16 params 2N, fp32 grads 4N, fp32 master 4N, Adam 8N (8N/4 at dp=4, ZeRO-2)")
for run in ["bf16", "bf16_tp2pp2sp", "bf16_dp4z2"]:
    r = records(run)
    first, last = r[0]["loss"], r[-1]["loss"]
    assert last < first - 0.5, (run, first, last)
    gap_fp32 = abs(last - fp32[-1]["loss"])
    assert gap_fp32 < 0.05, (run, last, fp32[-1]["loss"])
    print(f"{run}: loss {first:.4f} -> {last:.4f} (fp32 one process ends at {fp32[-1]['loss']:.4f})")
PY

# fp16: an overflow at step 3 on rank 1 (tp=2), a checkpoint after every step.
FP16=(--set train.precision=fp16 --set parallel.tp=2 --set checkpoint.interval=1 --set checkpoint.keep=30)
run_loom 2 fp16 "${FP16[@]}" --set checkpoint.dir="$WORK/fp16_ckpt" --inject-fault 1:3:overflow ||
  { cat "$WORK/fp16.log"; fail "fp16 run"; }
grep -q "gradients overflowed at step 3; the step is skipped and the loss scale goes 65536 -> 32768" "$WORK/fp16.log" ||
  { cat "$WORK/fp16.log"; fail "no overflow message"; }
python3 - "$WORK/fp16" "$WORK/fp16_ckpt" << 'PY' || fail "fp16 loss scaling"
import json, os, sys
r = [json.loads(line) for line in open(sys.argv[1] + "/metrics.jsonl")]
skipped = [x["step"] for x in r if x["skipped"]]
assert skipped == [3], skipped
scales = {x["step"]: x["loss_scale"] for x in r}
assert scales[1] == scales[2] == scales[3] == 65536 and all(scales[s] == 32768 for s in range(4, 21)), scales
assert r[-1]["loss"] < r[0]["loss"] - 0.5, (r[0]["loss"], r[-1]["loss"])
def tensors(step):
    d = f"{sys.argv[2]}/step_{step:08d}"
    m = json.load(open(d + "/manifest.json"))
    out = {}
    for name, t in m["tensors"].items():
        data = b""
        for s in t["slices"]:
            with open(os.path.join(d, s["file"]), "rb") as f:
                f.seek(s["byte_offset"])
                data += f.read(s["nbytes"])
        out[name] = data
    return m, out
m2, t2 = tensors(2)
m3, t3 = tensors(3)
m4, t4 = tensors(4)
assert m3["optimizer_steps"] == m2["optimizer_steps"] == 2 and m4["optimizer_steps"] == 3
assert t2 == t3, [k for k in t2 if t2[k] != t3[k]][:5]
assert any(t3[k] != t4[k] for k in t3 if k.startswith("model/"))
assert m3["loss_scaler"] == {"scale": 32768.0, "clean_steps": 0, "skipped_steps": 1}, m3["loss_scaler"]
print(f"fp16: step 3 skipped (weights and moments of steps 2 and 3 identical), scale 65536 -> 32768, "
      f"loss {r[0]['loss']:.4f} -> {r[-1]['loss']:.4f}")
PY
# Resumed after step 5 (scale 32768, 2 clean steps): steps 6-20 as the uninterrupted run.
run_loom 2 fp16_resumed "${FP16[@]}" --set checkpoint.dir="$WORK/fp16_ckpt" --resume "$WORK/fp16_ckpt/step_00000005" ||
  { cat "$WORK/fp16_resumed.log"; fail "fp16 resume"; }
compare_resumed "$WORK/fp16_resumed" "$WORK/fp16" 6 20 "fp16 resumed after step 5"
python3 - "$WORK/fp16_resumed" "$WORK/fp16" << 'PY' || fail "resumed loss scale"
import json, sys
a, b = ({json.loads(l)["step"]: json.loads(l)["loss_scale"] for l in open(d + "/metrics.jsonl")} for d in sys.argv[1:3])
assert all(a[s] == b[s] for s in a), (a, b)
PY

expect_bad() {  # expect_bad PATTERN ARGS...: loom train exits 2 and names PATTERN
  local pattern="$1" code=0
  shift
  "$LOOM" train "$TINY" --run-dir "$WORK/bad" "$@" > "$WORK/bad.log" 2>&1 || code=$?
  [ "$code" = 2 ] && grep -q -- "$pattern" "$WORK/bad.log" || { cat "$WORK/bad.log"; fail "'$*' exited $code"; }
}
expect_bad "needs train.precision fp16" --inject-fault 0:2:overflow
expect_bad "parallel.grad_reduce_dtype" --set parallel.grad_reduce_dtype=fp16
expect_bad "train.loss_scale_window" --set train.loss_scale_window=0
expect_bad "fp16 with model.moe" --set train.precision=fp16 --set model.moe.num_experts=4
echo "mixed_precision: ok"
