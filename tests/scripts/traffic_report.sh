#!/usr/bin/env bash
# The traffic report of real runs: at several layouts, the cost model's
# predicted calls and bytes per group equal every rank's counters exactly
# (`loom plan --run`), the rank-by-rank matrix sums to the counters' sent
# bytes, and a tp group spread over two (pretend) nodes is named. The same for a
# Llama (tests/configs/llama_tiny.yaml: 2 kv heads, untied, RMSNorm, no biases), and Muon's
# gathers and broadcasts.
source "$(dirname "$0")/common.sh"
LLAMA="$LOOM_SOURCE/tests/configs/llama_tiny.yaml"
CONFIG="$TINY"
MODEL=(--set model.num_layers=4 --set train.global_batch_size=16 --set train.steps=3 --set train.warmup_steps=1)

check_run() {  # check_run NAME NP [--set ...]: trains $CONFIG
  local name="$1" np="$2"
  shift 2
  mpirun --oversubscribe -np "$np" "$LOOM" train "$CONFIG" --run-dir "$WORK/$name" "${MODEL[@]}" "$@" \
    > "$WORK/$name.log" 2>&1 || { cat "$WORK/$name.log"; fail "run $name failed"; }
  grep -q "traffic per step, rank 0" "$WORK/$name.log" || { cat "$WORK/$name.log"; fail "$name printed no traffic table"; }
  "$LOOM" plan --run "$WORK/$name" > "$WORK/$name.plan" || { cat "$WORK/$name.plan"; fail "loom plan --run $name"; }
  python3 "$SCRIPTS/checks.py" plan-vs-run "$WORK/$name" || fail "$name: prediction or matrix differs from the counters"
}

check_run dp4 4
check_run tp2_dp2 4 --set parallel.tp=2
check_run tp2_sp 2 --set parallel.tp=2 --set parallel.sequence_parallel=true
check_run pp2_dp2_interleaved 4 --set parallel.pp=2 --set parallel.virtual_stages=2 --set parallel.schedule=interleaved
check_run tp2_pp2_dp2_sp 8 --set parallel.tp=2 --set parallel.pp=2 --set parallel.sequence_parallel=true

# Llama: at tp 2 each rank holds one kv head; at tp 4 both kv heads are on every rank and their
# gradients summed over tp (under ZeRO-3 by the dp rank whose shard holds them, the other making
# no call); the untied lm_head has no embedding-group sum across pipeline stages; under sequence
# parallelism only the RMSNorm weights are summed.
CONFIG="$LLAMA"
check_run llama_tp2_pp2_dp2_sp 8 --set parallel.tp=2 --set parallel.pp=2 --set parallel.sequence_parallel=true
check_run llama_tp4_dp2_zero3 8 --set parallel.tp=4 --set parallel.zero_stage=3
check_run llama_tp4_pp2_interleaved 8 --set parallel.tp=4 --set parallel.pp=2 --set parallel.virtual_stages=2 \
  --set parallel.schedule=interleaved
# Muon: the tp gathers of the updates of the weights this rank's dp rank owns, the owners'
# broadcasts under ZeRO-1, the units' gradient gathers and update reduce-scatters under ZeRO-3,
# and the momenta's broadcasts at each checkpoint.
check_run llama_muon_tp2_pp2_dp2_zero1 8 --set train.optimizer=muon --set parallel.tp=2 --set parallel.pp=2 \
  --set parallel.zero_stage=1 --set parallel.sequence_parallel=true --set train.muon.include=lm_head \
  --set train.muon.exclude='h.*.attn.proj.weight'
CONFIG="$TINY"
check_run muon_tp2_dp2_zero1_saving 4 --set train.optimizer=muon --set parallel.tp=2 --set parallel.zero_stage=1 \
  --set checkpoint.dir="$WORK/muon_ck" --set checkpoint.interval=1
check_run muon_tp2_dp2_zero3_saving 4 --set train.optimizer=muon --set parallel.tp=2 --set parallel.zero_stage=3 \
  --set checkpoint.dir="$WORK/muon_ck3" --set checkpoint.interval=2 --set train.muon.include=wte

# Ranks 0-1 on "node0", 2-3 on "node1": tp=4 spans both, and the report says so.
mpirun --oversubscribe -np 4 bash -c 'LOOM_HOST=node$((OMPI_COMM_WORLD_RANK / 2)) exec "$0" "$@"' "$LOOM" train "$TINY" \
  --run-dir "$WORK/tp4_two_nodes" "${MODEL[@]}" --set parallel.tp=4 > "$WORK/tp4.log" 2>&1 || { cat "$WORK/tp4.log"; fail "tp4 run"; }
grep -q "note: a tp group starting at rank 0 spans 2 nodes" "$WORK/tp4.log" || { cat "$WORK/tp4.log"; fail "tp across nodes not named"; }
if grep -q "note:" "$WORK/tp2_dp2.log"; then fail "a one-node tp=2 run should have no notes"; fi
# Intra- and inter-node bytes: with parallel.ranks_per_node 2, tp 2 x dp 2 puts each tp pair on a
# node and each dp pair across the two. Every counter's sent splits into sent_intra_node and
# sent_inter_node, summing to it: tp's all intra-node, dp's all inter-node; the same nodes in
# traffic.json and in `loom topology`; `loom plan --run` (in check_run) predicts the same split
# from the nodes and the ring's next rank, exactly.
check_run tp2_dp2_nodes 4 --set parallel.tp=2 --set parallel.ranks_per_node=2
"$LOOM" topology "$TINY" --world 4 --set parallel.tp=2 --set parallel.ranks_per_node=2 > "$WORK/topology_nodes.json" ||
  fail "loom topology with ranks_per_node"
python3 - "$WORK/tp2_dp2_nodes/traffic.json" "$WORK/topology_nodes.json" << 'PY' || fail "intra- and inter-node bytes"
import json, sys
report, topology = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert report["nodes"] == [[0, 1], [2, 3]] == topology["nodes"], (report["nodes"], topology["nodes"])
assert [r["node"] for r in report["ranks"]] == [0, 0, 1, 1]
seen = set()
for r in report["ranks"]:
    for group, ops in r["groups"].items():
        for op, c in ops.items():
            assert c["sent_intra_node"] + c["sent_inter_node"] == c["sent"], (r["rank"], group, op, c)
            if group == "tp" and c["sent"]:
                assert c["sent_inter_node"] == 0, (r["rank"], op, c)
                seen.add("tp")
            if group == "dp" and c["sent"]:
                assert c["sent_intra_node"] == 0, (r["rank"], op, c)
                seen.add("dp")
assert seen == {"tp", "dp"}, seen
print("intra/inter-node bytes split as the nodes say")
PY
echo "traffic report: ok"
