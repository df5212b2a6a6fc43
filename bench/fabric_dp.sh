#!/usr/bin/env bash
# Data parallelism across two nodes, measured on the simulated fabric beside the cost model: the
# README's small GPT (configs/gpt_tiny.yaml, 3.3 MB of fp32 gradients) at dp 4 on 2 nodes x 2
# ranks (scripts/fabric.sh, 100 Mbit/s between nodes), one gradient bucket (so the reduction is
# all exposed and its time is the step's dp time), 40 steps, each way: flat and hierarchical, bf16,
# int8 and PowerSGD (rank 4 from the first step), and at ZeRO-3 flat, hierarchical and HSDP
# (parallel.dp_shard 2: the shard group inside each node). Per variant: the median step, the dp
# collectives' exposed time per step (metrics.jsonl's time_split over steps 21-40, rank 0), the
# inter-node bytes per step of the busiest rank (traffic.json), and `loom plan --cluster
# configs/clusters/fabric_2x2_100mbit.yaml`'s predicted reduction for the same layout, with
# measured / predicted. Needs root (network namespaces).
#   bash bench/fabric_dp.sh [OUT_DIR]            # about 8 minutes on 2 cores
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-/tmp/loom-fabric-dp}"
LOOM="${LOOM:-build/loom}"
CLUSTER=configs/clusters/fabric_2x2_100mbit.yaml
mkdir -p "$OUT"
COMMON=(--set parallel.bucket_mb=0 --set train.steps=40 --set train.micro_batch_size=4 --set log.interval=20
  --set parallel.powersgd.rank=4 --set parallel.powersgd.start_step=0)
run() {  # run NAME [--set ...]
  local name="$1"
  shift
  rm -rf "${OUT:?}/$name"
  scripts/fabric.sh --nodes 2 --ranks-per-node 2 --inter-mbit 100 -- "$LOOM" train configs/gpt_tiny.yaml \
    --run-dir "$OUT/$name" "${COMMON[@]}" "$@" > "$OUT/$name.log" 2>&1 || { tail -20 "$OUT/$name.log"; exit 1; }
  "$LOOM" plan configs/gpt_tiny.yaml --cluster "$CLUSTER" --world 4 "${COMMON[@]}" "$@" > "$OUT/$name.plan"
}
run flat_none
run hierarchical_none --set parallel.dp_collectives=hierarchical
run flat_bf16 --set parallel.grad_compression=bf16
run flat_int8 --set parallel.grad_compression=int8
run hierarchical_int8 --set parallel.dp_collectives=hierarchical --set parallel.grad_compression=int8
run flat_powersgd --set parallel.grad_compression=powersgd
run zero3_flat --set parallel.zero_stage=3
run zero3_hierarchical --set parallel.zero_stage=3 --set parallel.dp_collectives=hierarchical
run zero3_hsdp --set parallel.zero_stage=3 --set parallel.dp_shard=2
python3 - "$OUT" <<'PY'
import json, statistics, sys
out = sys.argv[1]
rows = []
print(f"{'variant':<20} {'step ms':>8} {'dp ms':>8} {'max inter MB':>14} {'predicted dp ms':>16} {'measured/predicted':>19}")
# (run, the plan table's collectives column, its compression column)
variants = [("flat_none", "flat", "none"), ("hierarchical_none", "hierarchical", "none"), ("flat_bf16", "flat", "bf16"),
            ("flat_int8", "flat", "int8"), ("hierarchical_int8", "hierarchical", "int8"),
            ("flat_powersgd", "flat", "powersgd"), ("zero3_flat", "flat", "none"),
            ("zero3_hierarchical", "hierarchical", "none"), ("zero3_hsdp", "hsdp", "none")]
for name, collectives, compression in variants:
    m = [json.loads(l) for l in open(f"{out}/{name}/metrics.jsonl") if l.strip()]
    step = statistics.median(r["step_ms"] for r in m if r["step"] > 20)
    split = [r["time_split"] for r in m if "time_split" in r][-1]
    dp_ms = sum(v for k, v in split["exposed_ms"].items() if k.startswith("dp"))  # dp, and HSDP's dp-shard, dp-replicate
    t = json.load(open(f"{out}/{name}/traffic.json"))
    # The busiest rank's inter-node bytes (a flat ring sends them all from each node's last rank);
    # HSDP's are in its dp-shard and dp-replicate groups.
    inter = max(sum(c.get("sent_inter_node", 0) for g, ops in r["groups"].items() if g.startswith("dp")
                    for c in ops.values()) for r in t["ranks"]) / t["steps"]
    predicted = None
    for line in open(f"{out}/{name}.plan"):
        f = line.split()
        if collectives == "hsdp" and len(f) >= 6 and f[0] == "hsdp" and f[2] == compression:
            predicted = float(f[5]) * 1000  # HSDP's row names its dp_shard: "hsdp (2)"
        elif len(f) >= 5 and f[0] == collectives and f[1] == compression:
            predicted = float(f[4]) * 1000  # the last such row: the table of this config's layout comes last
    print(f"{name:<20} {step:>8.1f} {dp_ms:>8.1f} {inter / 1e6:>14.3f} {predicted:>16.1f} {dp_ms / predicted:>18.2f}x")
PY
