#!/usr/bin/env bash
# Asynchronous checkpoints (checkpoint.async: true, issue: unattended runs): the state is copied to host
# memory at the step boundary and written by a background thread while training goes on.
#  1. At dp 2 x tp 2, the async checkpoints of steps 5, 10, 15, 20 are byte for byte the sync ones (every
#     rank file; the manifest but for the run directory it names), training is unchanged, and a resume from one is bit-identical.
#  2. A background write that fails on one rank stops the job at the next step (exit 75, naming the
#     checkpoint), and nothing half-written is published.
#  3. A rank that writes its files for longer than parallel.timeout_s (slow_save: a large checkpoint
#     on a slow disk) is waited for, sync and async, up to checkpoint.timeout_s; past that the job
#     ends (exit 75: the machine failed the run) naming checkpoint.timeout_s and the rank. The others
#     waited on parallel.timeout_s and ended a healthy save (seen: a 1.2 GB checkpoint's resume on
#     this machine's disk). A rank stopped in its save: stalled_rank.sh save.
source "$(dirname "$0")/common.sh"
ARGS=(--set train.steps=20 --set parallel.tp=2 --set checkpoint.interval=5 --set checkpoint.keep=10)
run_loom 4 sync "${ARGS[@]}" --set checkpoint.dir="$WORK/ck_sync" || { cat "$WORK/sync.log"; fail "sync run failed"; }
run_loom 4 async "${ARGS[@]}" --set checkpoint.dir="$WORK/ck_async" --set checkpoint.async=true ||
  { cat "$WORK/async.log"; fail "async run failed"; }
grep -q "saved checkpoint .*step_00000005 .*written in the background" "$WORK/async.log" || fail "no background save logged"
for step in 00000005 00000010 00000015 00000020; do
  for file in rank_00000.bin rank_00001.bin rank_00002.bin rank_00003.bin; do
    cmp "$WORK/ck_sync/step_$step/$file" "$WORK/ck_async/step_$step/$file" || fail "step_$step/$file differs"
  done
  # The manifests name their own run and checkpoint directories (which the checksum covers); all else is equal.
  python3 - "$WORK/ck_sync/step_$step/manifest.json" "$WORK/ck_async/step_$step/manifest.json" << 'PY' ||
import json, sys
sync, async_ = ({k: v for k, v in json.load(open(p)).items() if k not in ("run_dir", "checkpoint_dir", "manifest_crc32")} for p in sys.argv[1:])
assert sync == async_, [k for k in sync if sync[k] != async_.get(k)]
assert json.load(open(sys.argv[1]))["run_dir"].endswith("/sync")
PY
    fail "step_$step/manifest.json differs beyond run_dir and checkpoint_dir"
done
python3 "$SCRIPTS/checks.py" steps-agree "$WORK/async" "$WORK/sync" --rtol 0 --first 1 --same-samples > /dev/null ||
  fail "an async checkpoint changed the training"
python3 - "$WORK/async/metrics.jsonl" << 'PY'
import json, sys
# A save's time goes into the next step's row (the row of its own step is written before it).
saved = [(r["step"], r["checkpoint_step"]) for r in map(json.loads, open(sys.argv[1])) if "checkpoint_ms" in r]
assert saved == [(6, 5), (11, 10), (16, 15)], f"checkpoint_ms in rows (step, checkpoint_step) {saved}"
PY
run_loom 4 resumed "${ARGS[@]}" --set checkpoint.dir="$WORK/ck_resumed" --resume "$WORK/ck_async/step_00000010" || { cat "$WORK/resumed.log"; fail "resume failed"; }
echo -n "async checkpoints equal the sync ones byte for byte; resumed from the async step 10: "
python3 "$SCRIPTS/checks.py" steps-agree "$WORK/resumed" "$WORK/sync" --rtol 0 --first 11 --last 20

code=0
run_loom 4 failed "${ARGS[@]}" --set checkpoint.dir="$WORK/ck_failed" --set checkpoint.async=true \
  --inject-fault 1:10:fail_save || code=$?
[ "$code" = 75 ] && grep -q "writing checkpoint .*step_00000010 in the background failed on" "$WORK/failed.log" ||
  { cat "$WORK/failed.log"; fail "a failed background write: exit $code, expected 75 (an environment failure) naming the checkpoint"; }
# The four ranks write into one log: the rank whose write failed names itself.
grep -q "loom: error: .*injected fault: writing this rank's checkpoint files failed.* (rank 1 of 4)$" "$WORK/failed.log" ||
  { cat "$WORK/failed.log"; fail "the failed rank's error does not name rank 1 of 4"; }
last=$(tail -1 "$WORK/failed/metrics.jsonl" | python3 -c 'import json, sys; print(json.load(sys.stdin)["step"])')
[ "$last" -le 11 ] || fail "the job went on to step $last after the failed write of step 10"
[ ! -d "$WORK/ck_failed/step_00000010" ] && [ "$(cat "$WORK/ck_failed/latest")" = step_00000005 ] ||
  { ls -a "$WORK/ck_failed"; fail "step 10 must not be published; step 5 stays the newest"; }
echo "a failed background write stopped the job after step $last; step_00000005 stays the newest"
SLOW=(--set train.steps=3 --set train.warmup_steps=1 --set checkpoint.interval=2 --set parallel.timeout_s=2)
for mode in false true; do
  run_loom 2 "slow_$mode" "${SLOW[@]}" --set checkpoint.dir="$WORK/ck_slow_$mode" --set checkpoint.async=$mode \
    --inject-fault 0:2:slow_save:5000 || { cat "$WORK/slow_$mode.log"; fail "a 5 s write (async $mode) ended the job"; }
  [ "$(cat "$WORK/ck_slow_$mode/latest")" = step_00000003 ] && [ -d "$WORK/ck_slow_$mode/step_00000002" ] ||
    { cat "$WORK/slow_$mode.log"; fail "async $mode: steps 2 and 3 not both saved"; }
done
echo "a rank writing its checkpoint files 5 s (parallel.timeout_s 2): waited for, sync and async"
code=0
run_loom 2 slow_bounded "${SLOW[@]}" --set checkpoint.dir="$WORK/ck_slow_bounded" --set checkpoint.timeout_s=2 \
  --inject-fault 0:2:slow_save:5000 || code=$?
[ "$code" = 75 ] && grep -q "loom: error: writing checkpoint .*step_00000002: rank 0 had not finished after 2 s, checkpoint.timeout_s" "$WORK/slow_bounded.log" &&
  [ "$(cat "$WORK/ck_slow_bounded/latest" 2> /dev/null)" != step_00000002 ] ||
  { cat "$WORK/slow_bounded.log"; fail "past checkpoint.timeout_s: exit $code"; }
echo "past checkpoint.timeout_s 2: exit 75 naming it and rank 0, step 2 not published"
echo "async checkpoints: ok"
