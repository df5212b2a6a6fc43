#!/usr/bin/env bash
# parallel.dp_collectives on the simulated fabric (scripts/fabric.sh: 2 nodes x 2 ranks, network
# namespaces joined by a bridge; loom finds the nodes from LOCAL_WORLD_SIZE, as on a cluster):
# flat and hierarchical under ZeRO 0, 1 and 3 train the one-process losses within 1e-5 over 20
# steps, and each rank's dp bytes split by level as the formulas say: the hierarchical all-reduce
# sends 2(N-1)/N of a rank's 1/L share across nodes, where the flat ring sends 2(P-1)/P of the
# whole from each node's last rank. A layout whose nodes hold unequal shares of a dp group is
# refused (exit 2).
source "$(dirname "$0")/common.sh"
FABRIC="$LOOM_SOURCE/scripts/fabric.sh"

fabric_run() {  # fabric_run NAME [--set ...]: 2 nodes x 2 ranks train the tiny config into $WORK/NAME
  local name="$1"
  shift
  "$FABRIC" --nodes 2 --ranks-per-node 2 -- "$LOOM" train "$TINY" --run-dir "$WORK/$name" \
    --set parallel.bucket_mb=0 "$@" > "$WORK/$name.log" 2>&1 || { cat "$WORK/$name.log"; fail "$name run"; }
}

run_loom 1 ref --set train.micro_batch_size=8 || { cat "$WORK/ref.log"; fail "one-process run"; }
# log.cluster: the run's end measures each group's link; a flat dp group gets a line, a two-level
# one is left unfitted (two kinds of link), on every rank alike (no rank waits in a probe alone).
CLUSTER=(--set log.cluster="$LOOM_SOURCE/configs/clusters/fabric_2x2_100mbit.yaml")
dp_link() {  # dp_link NAME: the dp row of the run's measured links
  python3 -c 'import json, sys; print([r for r in json.load(open(sys.argv[1]))["links"] if r["group"] == "dp"][0])' \
    "$WORK/$1/diagnosis.json"
}
fabric_run flat "${CLUSTER[@]}"
compare_losses "$WORK/flat" "$WORK/ref" || fail "flat dp 4 differs from one process"
[[ "$(dp_link flat)" == *"'alpha_us'"*"'link': 'inter-node'"* ]] || fail "flat dp's link not measured: $(dp_link flat)"
python3 "$SCRIPTS/checks.py" two-level-traffic "$WORK/flat" --nodes 2 || fail "flat traffic by level"
for zero in 0 1 3; do
  name="hierarchical_zero$zero"
  extra=()
  [ "$zero" = 0 ] && extra=("${CLUSTER[@]}")
  fabric_run "$name" --set parallel.dp_collectives=hierarchical --set "parallel.zero_stage=$zero" "${extra[@]}"
  if [ "$zero" = 0 ]; then
    [[ "$(dp_link "$name")" == *"'no_fit'"*"a two-level group"* ]] || fail "$name: dp's link: $(dp_link "$name")"
  fi
  echo -n "$name vs one process: "
  compare_losses "$WORK/$name" "$WORK/ref" || fail "$name differs from one process"
  python3 "$SCRIPTS/checks.py" two-level-traffic "$WORK/$name" --nodes 2 --hierarchical --buckets $((zero < 2)) ||
    fail "$name traffic by level"
  "$LOOM" plan --run "$WORK/$name" > "$WORK/$name.plan" || { cat "$WORK/$name.plan"; fail "loom plan --run $name"; }
  python3 "$SCRIPTS/checks.py" plan-vs-run "$WORK/$name" || fail "$name: counters differ from the prediction"
done
# The comparison can fail: flat's split is not hierarchical's.
if python3 "$SCRIPTS/checks.py" two-level-traffic "$WORK/flat" --nodes 2 --hierarchical > /dev/null 2>&1; then
  fail "the flat run passed the hierarchical formulas"
fi

# Ranks 0-1 on host a, 2 on host b: dp 3 splits 2 + 1 over the nodes, which two levels cannot take.
expect_exit 2 "parallel.dp_collectives" mpirun --oversubscribe -np 3 \
  bash -c 'LOOM_HOST=host$((OMPI_COMM_WORLD_RANK / 2)) exec "$0" "$@"' "$LOOM" train "$TINY" \
  --run-dir "$WORK/uneven" --set train.global_batch_size=6 --set parallel.dp_collectives=hierarchical
echo "hierarchical dp collectives: ok"
