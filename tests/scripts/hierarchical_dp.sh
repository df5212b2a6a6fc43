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
fabric_run flat
compare_losses "$WORK/flat" "$WORK/ref" || fail "flat dp 4 differs from one process"
python3 "$SCRIPTS/checks.py" two-level-traffic "$WORK/flat" --nodes 2 || fail "flat traffic by level"
for zero in 0 1 3; do
  name="hierarchical_zero$zero"
  fabric_run "$name" --set parallel.dp_collectives=hierarchical --set "parallel.zero_stage=$zero"
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
