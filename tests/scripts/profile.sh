#!/usr/bin/env bash
# log.profile_step_start/end: LibTorch's profiler over those steps of rank 0 writes a Chrome
# trace that holds the steps' operators (read back as JSON); the other ranks write none; a
# range that ends before it starts, or starts after the run ends, is refused with exit 2, naming the key.
source "$(dirname "$0")/common.sh"
SETS=(--set train.steps=5 --set train.warmup_steps=1 --set log.profile_step_start=2 --set log.profile_step_end=3)
run_loom 2 profiled --set parallel.dp=2 "${SETS[@]}" || { cat "$WORK/profiled.log"; fail "profiled run"; }
grep -q "profile: steps from 2 traced to $WORK/profiled/profile_rank0.json" "$WORK/profiled.log" ||
  { cat "$WORK/profiled.log"; fail "no line says where the trace is"; }
[ ! -e "$WORK/profiled/profile_rank1.json" ] || fail "rank 1 wrote a trace"
python3 - "$WORK/profiled/profile_rank0.json" << 'PY' || fail "the trace does not hold the steps' operators"
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
names = {e.get("name", "") for e in events}
# The forward's matrix products and the backward's: the steps themselves were traced.
assert any(n.startswith("aten::mm") or n.startswith("aten::addmm") or n == "aten::linear" for n in names), sorted(names)[:40]
assert any("Backward" in n for n in names), sorted(names)[:40]
print(f"profile: {len(events)} events in the trace")
PY
status=0
"$LOOM" train "$TINY" --run-dir "$WORK/bad" --set log.profile_step_start=3 --set log.profile_step_end=2 > "$WORK/bad.log" 2>&1 ||
  status=$?
[ "$status" = 2 ] && grep -q "log.profile_step_end" "$WORK/bad.log" || { cat "$WORK/bad.log"; fail "a backwards range was not refused (exit $status)"; }
# A start beyond the run would profile nothing: refused, naming the key.
status=0
"$LOOM" train "$TINY" --run-dir "$WORK/beyond" --set train.steps=3 --set train.warmup_steps=1 --set log.profile_step_start=50 \
  > "$WORK/beyond.log" 2>&1 || status=$?
[ "$status" = 2 ] && grep -q "log.profile_step_start" "$WORK/beyond.log" || { cat "$WORK/beyond.log"; fail "a start beyond train.steps was not refused (exit $status)"; }
# So would an end beyond it, which was cut to the run's last step without a word.
status=0
"$LOOM" train "$TINY" --run-dir "$WORK/end_beyond" --set train.steps=3 --set train.warmup_steps=1 --set log.profile_step_start=2 \
  --set log.profile_step_end=50 > "$WORK/end_beyond.log" 2>&1 || status=$?
[ "$status" = 2 ] && grep -q "log.profile_step_end.*train.steps = 3" "$WORK/end_beyond.log" ||
  { cat "$WORK/end_beyond.log"; fail "an end beyond train.steps was not refused (exit $status)"; }
echo "profile: ok"
