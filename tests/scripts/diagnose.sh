#!/usr/bin/env bash
# The step-time split and the diagnosis ladder (launch/step_split.h): every run ends with its verdict
# (the last line of its output, also in RUN_DIR/diagnosis.json), `loom diagnose RUN_DIR` prints it
# again, and each planted cause is named:
# 1. a plain run of the README's model -> compute-bound, its MFU in the verdict (given a peak);
# 2. every tp collective of one rank delayed 20 ms (--inject-fault 1:1:delay:tp:20) -> communication-bound on tp,
#    and `loom diagnose --cluster` names tp as the part furthest from loom plan's prediction, as does
#    the run's own end given log.cluster (a wrong file refused before step 1); a mixture of experts
#    at ep 2 -> communication-bound on ep, its all-to-all beside the plan's even-routing prediction;
# 3. pp 4 with 4 micro-batches a step -> bubble-bound, its measured pipeline idle beside the
#    schedule's (p - 1) / (m + p - 1) = 3/7;
# 4. each batch read delayed 100 ms (slow-data:100) -> input-bound; one checkpoint written 2 s long
#    (slow_save:2000) -> checkpoint-bound;
# 5. one rank sleeping 200 ms a step (straggler:1:200) at dp 2 -> straggler-bound naming rank 1;
#    ZeRO-3 at dp 2 with rank 1's dp collectives delayed -> memory-bound, its parameter gathers;
# 6. dp 4 across a throttled link of the simulated fabric -> communication-bound on dp, inter-node.
# 7. a run stopped after its first step (never counted) -> unmeasured, where it was compute-bound at 0%.
# The planted delays are tens of times the tiny model's step, so that the verdicts do not hang on
# this machine's speed. metrics.jsonl's log lines carry the split (time_split).
source "$(dirname "$0")/common.sh"
SHORT=(--set train.steps=8 --set train.warmup_steps=1)

# run NAME NP CONFIG [args...]: loom train into $WORK/NAME; VERDICT its last line.
run() {
  local name="$1" np="$2" config="$3"
  shift 3
  mpirun -np "$np" "$LOOM" train "$config" --run-dir "$WORK/$name" "${SHORT[@]}" "$@" > "$WORK/$name.log" 2>&1 ||
    { cat "$WORK/$name.log"; fail "$name"; }
  # Rank 0 prints the verdict last; under mpirun another rank's stderr may still land after it in the
  # merged log (seen twice under ctest -j2: an empty last line), so the log's verdict line is read
  # by its prefix, and loom diagnose (one process) must end with exactly it.
  VERDICT="$(grep '^verdict: ' "$WORK/$name.log" | tail -1)"
  [ -n "$VERDICT" ] || { cat "$WORK/$name.log"; fail "$name printed no verdict"; }
  echo "$name: $VERDICT"
  # loom diagnose prints the same verdict, last.
  "$LOOM" diagnose "$WORK/$name" > "$WORK/$name.diagnose" || fail "loom diagnose $name"
  [ "$(tail -1 "$WORK/$name.diagnose")" = "$VERDICT" ] || { cat "$WORK/$name.diagnose"; fail "loom diagnose $name differs"; }
}

run readme 1 "$LOOM_SOURCE/configs/gpt_tiny.yaml" --set train.steps=30
[[ "$VERDICT" == "verdict: compute-bound"* ]] || fail "the README's model is not compute-bound"
# How far from the peak: the MFU of the run's last lines, in the verdict (none assumed on a CPU).
[[ "$VERDICT" == *"MFU: no peak assumed on CPU"* ]] || fail "the compute-bound verdict does not say why it has no MFU"
run peak 1 "$LOOM_SOURCE/configs/gpt_tiny.yaml" --set train.peak_tflops=0.5
MFU="$(grep -o 'MFU [0-9.]*% of 0.5 TFLOP/s' "$WORK/peak.log" | head -1)"
[ -n "$MFU" ] && [[ "$VERDICT" == "verdict: compute-bound"*"$MFU"* ]] || fail "the verdict does not give the run's MFU ($MFU)"
H100_NODE="$LOOM_SOURCE/configs/clusters/h100_sxm_8x_ib.yaml"
run tp_delay 2 "$TINY" --set parallel.tp=2 --inject-fault 1:1:delay:tp:20 --set log.cluster="$H100_NODE"
[[ "$VERDICT" == "verdict: communication-bound tp"* ]] || fail "a delayed tp all-reduce is not communication-bound on tp"
# log.cluster: the run's own closing diagnosis sets the plan beside it (and keeps it in diagnosis.json
# for loom diagnose without --cluster), the verdict still last.
for f in "$WORK/tp_delay.log" "$WORK/tp_delay.diagnose"; do
  grep -q "largest deviation: communication tp, measured" "$f" || { cat "$f"; fail "log.cluster: no plan beside the run in $f"; }
done
# ... and each group's link measured at the run's end (all-reduces of three sizes, a line through
# them): tp's latency is the planted 20 ms a call (rank 0 waits for rank 1) against NVLink's
# microseconds, and the verdict quotes it.
[[ "$VERDICT" == *"tp's link measured"*"against the cluster's"* ]] || fail "the verdict does not quote tp's measured link"
python3 - "$WORK/tp_delay.log" << 'PY' || { cat "$WORK/tp_delay.log"; fail "tp's link beside the cluster's"; }
import sys
lines = open(sys.argv[1]).read().split("each group's link, measured at the run's end")[1].splitlines()
rows = [l.split() for l in lines if l.split()[:1] == ["tp"]]
assert len(rows) == 1 and rows[0][2] == "intra-node", rows
alpha, cluster_alpha = float(rows[0][3]), float(rows[0][5])
assert alpha > 2000 and cluster_alpha < 10, rows[0]
print(f"tp's link: alpha {alpha:.0f} us measured, {cluster_alpha} us in the cluster file")
PY
# Afterwards against another cluster: the run's measured links beside that cluster's figures (A100
# NVLink, 300 GB/s), in the table and in the verdict, not the H100's the run named.
"$LOOM" diagnose "$WORK/tp_delay" --cluster "$LOOM_SOURCE/configs/clusters/cloud_8x_a100_100gbe.yaml" > "$WORK/tp_a100.log" ||
  fail "loom diagnose --cluster (another cluster)"
grep -qE "^  tp +2 +intra-node +[0-9.]+ +([0-9.e+]+|-) +3.0 +300$" "$WORK/tp_a100.log" &&
  [[ "$(tail -1 "$WORK/tp_a100.log")" == *"against the cluster's 3 us and 300 GB/s" ]] ||
  { cat "$WORK/tp_a100.log"; fail "the measured links beside another cluster"; }
# Beside loom plan's prediction for the same layout on a cluster: the delayed tp all-reduces are the
# part that deviates most from it, and the verdict stays the last line.
"$LOOM" diagnose "$WORK/tp_delay" --cluster "$H100_NODE" > "$WORK/tp_plan.log" ||
  fail "loom diagnose --cluster"
grep -q "beside loom plan's prediction for this layout on 8x H100" "$WORK/tp_plan.log" &&
  grep -q "largest deviation: communication tp, measured" "$WORK/tp_plan.log" &&
  [ "$(tail -1 "$WORK/tp_plan.log")" = "$VERDICT" ] || { cat "$WORK/tp_plan.log"; fail "diagnose beside the plan"; }
# ... and each collective per call beside the cluster's alpha-beta: the delayed tp all-reduce takes
# milliseconds a call (rank 0 waits 20 ms for rank 1 each time; the mean is over both ranks), where
# the cluster's NVLink would take microseconds.
python3 - "$WORK/tp_plan.log" << 'PY' || { cat "$WORK/tp_plan.log"; fail "the tp all-reduce beside alpha-beta"; }
import sys
rows = [l.split() for l in open(sys.argv[1]) if l.split()[:2] == ["tp", "all_reduce"]]
assert len(rows) == 1, rows
measured, predicted = float(rows[0][-2]), float(rows[0][-1])
assert rows[0][3] == "intra-node" and measured > 5 and predicted < 0.1, rows[0]
print(f"tp all_reduce: {measured} ms a call measured, {predicted} ms by the cluster's alpha-beta")
PY
# Every rank measures its own groups: at tp 2 x dp 2 with rank 3's tp all-reduces delayed, the slow
# link is in the tp group of ranks 2 and 3, not rank 0's, and the table and the verdict name it.
run tp_delay_far 4 "$TINY" --set parallel.tp=2 --inject-fault 3:1:delay:tp:20 --set log.cluster="$H100_NODE"
python3 - "$WORK/tp_delay_far" "$VERDICT" << 'PY' || { cat "$WORK/tp_delay_far.log"; fail "the slow tp group of ranks 2, 3"; }
import json, sys
tp = [r for r in json.load(open(sys.argv[1] + "/diagnosis.json"))["links"] if r["group"] == "tp"][0]
groups = {tuple(g["ranks"]): g for g in tp["groups"]}
assert set(groups) == {(0, 1), (2, 3)}, groups
slow, fast = groups[(2, 3)], groups[(0, 1)]
assert tp["slowest"]["ranks"] == [2, 3] and slow["alpha_us"] > 2000 and slow["alpha_us"] > 2 * fast.get("alpha_us", 0), tp
assert "in its slowest group (ranks 2, 3)" in sys.argv[2], sys.argv[2]
print(f"tp groups: ranks 2, 3 at {slow['alpha_us']:.0f} us, ranks 0, 1 at {fast.get('alpha_us', 0):.0f} us")
PY
grep -qE "^    its group of ranks 2, 3: [0-9.]+ us" "$WORK/tp_delay_far.log" || { cat "$WORK/tp_delay_far.log"; fail "the table's other tp group"; }
# At pp 3 the middle stage has no embedding group: the gathered fits still line up on every rank.
run pp3_links 3 "$TINY" --set parallel.pp=3 --set model.num_layers=3 --set log.cluster="$H100_NODE"
python3 - "$WORK/pp3_links/diagnosis.json" << 'PY' || { cat "$WORK/pp3_links.log"; fail "the links at pp 3"; }
import json, sys
links = {r["group"]: r for r in json.load(open(sys.argv[1]))["links"]}
assert [g["ranks"] for g in links["embedding"]["groups"]] == [[0, 2]], links["embedding"]
assert [g["ranks"] for g in links["pp"]["groups"]] == [[0, 1, 2]], links["pp"]
print("pp 3: the embedding group of ranks 0, 2 and the pp group of all three, gathered alike")
PY
# A mixture of experts at ep 2 beside the plan: the experts' all-to-all predicted for even routing
# (launch/expert_plan.h) on the cluster's NVLink, measured over Gloo here: ep deviates most.
# Rank 1's ep collectives are delayed 20 ms so that ep, not the CPU's compute (which the H100 figures
# also miss by as much), is the part furthest from the plan whatever this machine's speed.
run moe_ep 2 "$TINY" --set model.moe.num_experts=4 --set model.moe.top_k=2 --set parallel.ep=2 --set log.cluster="$H100_NODE" \
  --inject-fault 1:1:delay:ep:20
[[ "$VERDICT" == "verdict: communication-bound ep"* ]] || fail "an MoE at ep 2 over Gloo is not communication-bound on ep"
python3 - "$WORK/moe_ep/diagnosis.json" << 'PY' || { cat "$WORK/moe_ep.log"; fail "the MoE's all-to-all beside the plan"; }
import json, sys
plan = json.load(open(sys.argv[1]))["plan"]
ep = [p for p in plan["parts"] if p["part"] == "communication ep"][0]
assert 0 < ep["predicted_ms"] < ep["measured_ms"], ep
assert plan["largest_deviation"]["part"] == "communication ep", plan["largest_deviation"]
print(f"communication ep: {ep['measured_ms']:.1f} ms measured, {ep['predicted_ms']:.3f} ms predicted")
PY
grep -qE "^  ep +all_to_all +2 " "$WORK/moe_ep.log" || { cat "$WORK/moe_ep.log"; fail "the ep all-to-all per call beside the cluster"; }
run bubble 4 "$TINY" --set parallel.pp=4 --set model.num_layers=4 --set train.micro_batch_size=2
[[ "$VERDICT" == "verdict: bubble-bound pp"* ]] || fail "pp 4 with 4 micro-batches is not bubble-bound"
python3 - "$WORK/bubble/diagnosis.json" << 'PY' || fail "the bubble's diagnosis"
import json, sys
d = json.load(open(sys.argv[1]))
assert abs(d["bubble_formula"] - 3 / 7) < 1e-12, d["bubble_formula"]
idle = d["shares"]["pipeline idle"]
print(f"pipeline idle {idle:.0%} of the step measured, the schedule's formula {d['bubble_formula']:.0%}")
assert 0.25 <= idle <= 0.9, idle
PY
run slow_data 1 "$TINY" --inject-fault 0:1:slow-data:100
[[ "$VERDICT" == "verdict: input-bound"* ]] || fail "slow batch reads are not input-bound"
# One checkpoint written 2 s long (slow_save), against steps of milliseconds.
run slow_save 1 "$TINY" --set checkpoint.dir="$WORK/ck_slow_save" --set checkpoint.interval=4 \
  --inject-fault 0:4:slow_save:2000
[[ "$VERDICT" == "verdict: checkpoint-bound: saving checkpoints stalls training"*"(checkpoint.async: true writes them meanwhile); checkpoint.interval is 4" ]] ||
  fail "a slow checkpoint write is not checkpoint-bound"
# ZeRO-3 at dp 2 with every dp collective of rank 1 delayed 20 ms: the parameter gathers (each
# block's twice per micro-batch, against one reduce-scatter) take the largest share -> memory-bound.
run zero3_gathers 2 "$TINY" --set parallel.zero_stage=3 --inject-fault 1:1:delay:dp:20
[[ "$VERDICT" == "verdict: memory-bound dp: ZeRO-3's parameter gathers exposed"* ]] ||
  fail "ZeRO-3 with slow dp collectives is not memory-bound on its gathers"
run straggler 2 "$TINY" --inject-fault 1:1:straggler:1:200
[[ "$VERDICT" == "verdict: straggler-bound rank 1"* ]] || fail "a sleeping rank is not named a straggler"
python3 - "$WORK/straggler/metrics.jsonl" << 'PY' || fail "metrics.jsonl's time_split"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
split = [r["time_split"] for r in rows if "time_split" in r]
assert split and all({"compute_ms", "data_ms", "optimizer_ms", "checkpoint_ms", "exposed_ms"} <= set(s) for s in split), rows[-1]
PY
# 6. On the simulated fabric (scripts/fabric.sh: 2 nodes x 2 ranks, 20 Mbit/s between them), dp 4's
#    gradient all-reduce crosses the throttled link -> communication-bound on dp, inter-node.
"$LOOM_SOURCE/scripts/fabric.sh" --nodes 2 --ranks-per-node 2 --inter-mbit 20 -- "$LOOM" train "$TINY" \
  --run-dir "$WORK/fabric" "${SHORT[@]}" --set parallel.bucket_mb=0 > "$WORK/fabric.log" 2>&1 ||
  { cat "$WORK/fabric.log"; fail "the fabric run"; }
# The four ranks share one log: another rank's last line can follow rank 0's verdict there.
VERDICT="$(grep '^verdict:' "$WORK/fabric.log" | tail -1)"
echo "fabric: $VERDICT"
[[ "$VERDICT" == "verdict: communication-bound dp inter-node"*"of dp's bytes crossed nodes"* ]] ||
  fail "a throttled inter-node link is not communication-bound on dp, inter-node"
"$LOOM" diagnose "$WORK/fabric" | tail -1 | grep -qF "$VERDICT" || fail "loom diagnose fabric differs"

# A run stopped after its first step (the warm-up, never counted) has no share to rank: said so.
"$LOOM" train "$TINY" --run-dir "$WORK/one_step" --set train.warmup_steps=0 --set checkpoint.dir="$WORK/one_ck" \
  --set train.exit_after=1 > "$WORK/one_step.log" 2>&1 || { cat "$WORK/one_step.log"; fail "one step"; }
"$LOOM" diagnose "$WORK/one_step" | grep -qx "verdict: unmeasured: no step was measured .*" ||
  { "$LOOM" diagnose "$WORK/one_step"; fail "a run of no measured step was given a verdict"; }

expect_exit 2 "diagnosis.json is missing" "$LOOM" diagnose "$WORK/nowhere"
mkdir -p "$WORK/hand_edited" && echo '{"steps": 3}' > "$WORK/hand_edited/diagnosis.json"
expect_exit 2 "is not a diagnosis this version reads" "$LOOM" diagnose "$WORK/hand_edited"
expect_exit 2 "cannot read cluster file" "$LOOM" diagnose "$WORK/tp_delay" --cluster "$WORK/no_cluster.yaml"
# log.cluster is read before step 1: a wrong file stops the run there.
expect_exit 2 "log.cluster: cannot read cluster file" "$LOOM" train "$TINY" --set log.cluster="$WORK/no_cluster.yaml"
expect_exit 2 "log.cluster: cannot read cluster file '$WORK': a directory" "$LOOM" train "$TINY" --set log.cluster="$WORK"
expect_exit 2 "delay:GROUP:MS needs GROUP" "$LOOM" train "$TINY" --inject-fault 0:1:delay:xx:5
expect_exit 2 "this layout has no tp group" "$LOOM" train "$TINY" --inject-fault 0:1:delay:tp:5
expect_exit 2 "the straggler is the fault's rank" "$LOOM" train "$TINY" --inject-fault 0:1:straggler:1:5
echo "diagnose: ok"
