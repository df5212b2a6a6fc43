#!/usr/bin/env bash
# Straggler report (issue: unattended runs): every log interval metrics.jsonl holds the ranks' compute time
# per step (min, median, max, slowest rank), and a rank persistently over 20% slower than the median is named
# in a warning. Rank 2 of 3 is made 100 ms slower per step (--inject-fault 2:1:slow, a sleep outside any
# collective): every report names it the slowest, and one warning names it.
source "$(dirname "$0")/common.sh"
run_loom 3 slow --set train.global_batch_size=6 --set train.steps=12 --set train.warmup_steps=2 --set log.interval=2 \
  --inject-fault 2:1:slow || { cat "$WORK/slow.log"; fail "the run with a slow rank failed"; }
python3 - "$WORK/slow/metrics.jsonl" << 'PY'
import json, sys
records = [json.loads(line) for line in open(sys.argv[1])]
reports = [(r["step"], r["step_time"]) for r in records if "step_time" in r]
steps = [s for s, _ in reports]
assert steps == [2, 4, 6, 8, 10, 12], f"step_time at steps {steps}, expected every log interval"
for step, t in reports:
    assert t["slowest_rank"] == 2, f"step {step}: slowest rank {t['slowest_rank']}, expected 2: {t}"
    assert t["max_ms"] >= 50 and t["min_ms"] <= t["median_ms"] <= t["max_ms"], f"step {step}: {t}"
print("every report names rank 2 the slowest:", reports[-1][1])
PY
[ "$(grep -c "straggler: rank 2 computed" "$WORK/slow.log")" = 1 ] || { cat "$WORK/slow.log"; fail "expected one warning naming rank 2"; }
grep -v "straggler: rank 2" "$WORK/slow.log" | grep -q "straggler:" && fail "a rank other than 2 was named"
grep "straggler: rank 2" "$WORK/slow.log"
echo "straggler: ok"
