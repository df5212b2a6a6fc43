#!/usr/bin/env bash
# A job left alone for weeks (issue: unattended runs) never trades a good checkpoint for a bad one:
#  1. Divergence: train.lr 1e30 makes the loss NaN; every rank (dp 2 under mpirun) skips the update,
#     the run stops after train.max_skipped_steps with exit 3 naming the steps, the checkpoint that
#     could not train is set aside, and --resume auto then trains finite losses equal to an
#     uninterrupted run's, bit for bit. metrics.jsonl is continued across the resumes, each step
#     once: the diverged attempt's rows move to metrics.superseded.jsonl. bf16 and fp16 stop alike,
#     and so does a run whose last steps are non-finite, however few (exit 3, its state unsaved).
#  2. keep 1 with a corrupt newest checkpoint: it is set aside, the run falls back, and the next
#     --resume auto continues the new checkpoints instead of starting from scratch.
#  3. A rollback (--resume .../step_9 while step_12 exists): with train.steps 9 it changes nothing;
#     otherwise step_12 is set aside as abandoned and
#     --resume auto follows the run going on. A job stopped between a save's rename and latest's
#     update (latest still naming the save before, latest.publishing the new one) resumes from the
#     new save, nothing set aside.
#     The same command again with train.exit_after at or before the checkpoint's step is refused
#     (exit 2): it would train nothing and save again for ever, or train past the limit. A requeued
#     job's hand resume (the same --resume step_9 under SLURM_RESTART_COUNT 1) goes on from the
#     newest checkpoint that job saved since; another job's restart resumes step 9 as asked.
#     train.exit_duration_mins stops every rank after the same step, saved; --resume auto goes on.
#  4. An edited manifest (one byte offset, a removed key) is refused naming manifest.json, exit 2,
#     and --resume auto falls back.
#  5. A second job in a run directory or checkpoint.dir in use exits 2 naming the holder's host and
#     pid; a dead holder's lock is taken over with a warning. A fresh run refuses a run directory
#     with another run's metrics (unless --overwrite-run-dir) and a checkpoint.dir that holds checkpoints; --resume auto of a finished run says there is nothing to do.
#  6. A write that fails (a full disk: metrics.jsonl, a synchronous checkpoint) exits 75 (EX_TEMPFAIL, an
#     environment failure a scheduler may requeue) naming the file; the checkpoint leaves the previous one.
source "$(dirname "$0")/common.sh"
STEPS=(--set train.steps=20 --set train.warmup_steps=2)
train() { run_loom "$1" "$2" "${STEPS[@]}" "${@:3}"; }  # train NP NAME [args...]: exits like loom
must_train() { train "$@" || { cat "$WORK/$2.log"; fail "run $2 failed"; }; }
expect_code() {  # expect_code CODE NAME PATTERN: run NAME exited CODE and its log matches PATTERN
  [ "$4" = "$1" ] && grep -q -- "$3" "$WORK/$2.log" || { cat "$WORK/$2.log"; fail "$2: exit $4, expected $1 and '$3'"; }
}
lines() { wc -l < "$1"; }

# 1. Divergence, at dp 2 under mpirun: every rank must skip alike.
must_train 2 straight
# Steps 1-8, saving every 2 with keep 1: step_6 is verified (step 7 trained from it), step_8 not yet.
must_train 2 div --set checkpoint.dir="$WORK/ck_div" --set checkpoint.interval=2 --set checkpoint.keep=1 --set train.exit_after=8
[ -f "$WORK/ck_div/step_00000006/verified" ] && [ ! -f "$WORK/ck_div/step_00000008/verified" ] ||
  { ls -R "$WORK/ck_div"; fail "step_6 should be verified and kept beside step_8"; }
code=0
train 2 div --set checkpoint.dir="$WORK/ck_div" --set checkpoint.interval=1 --set checkpoint.keep=1 \
  --set train.lr=1e30 --set train.min_lr=0 --resume auto || code=$?
expect_code 3 div "the run diverged: steps 10 to 14 had a non-finite loss or gradient norm (5 in a row" $code
grep -q "rank 1.*step 14: loss .*not finite; the update is skipped" "$WORK/div.log" || fail "rank 1 did not skip step 14"
# Every rank's error gives rank 0's advice: a checkpoint is left, nobody is told to start afresh
# (the first rank to print may end the job before the other prints).
[ "$(grep -c "the run diverged.*--resume auto continues from .*step_00000008" "$WORK/div.log")" -ge 1 ] &&
  ! grep -q "start afresh" "$WORK/div.log" || { cat "$WORK/div.log"; fail "a rank's advice was not rank 0's"; }
[ -d "$WORK/ck_div/step_00000009.diverged" ] && [ -f "$WORK/ck_div/step_00000008/verified" ] &&
  [ "$(cat "$WORK/ck_div/latest")" = step_00000008 ] && [ "$(ls "$WORK/ck_div" | grep -c '^step_........$')" = 1 ] ||
  { ls -R "$WORK/ck_div"; fail "after the divergence: step_9 set aside, step_8 kept, verified and latest"; }
must_train 2 div --set checkpoint.dir="$WORK/ck_div" --set checkpoint.keep=1 --resume auto
grep -q "resumed from .*step_00000008 at step 8" "$WORK/div.log" || { cat "$WORK/div.log"; fail "did not resume at step 8"; }
[ "$(lines "$WORK/div/metrics.jsonl")" = 20 ] && [ "$(lines "$WORK/div/metrics.superseded.jsonl")" = 6 ] ||
  fail "metrics.jsonl should hold steps 1-20 once, and the diverged attempt's 6 rows be in metrics.superseded.jsonl"
python3 - "$WORK/div/metrics.jsonl" << 'EOF'
import json, sys
steps = [json.loads(line)["step"] for line in open(sys.argv[1])]
assert steps == list(range(1, 21)), f"steps in metrics.jsonl: {steps}"
EOF
echo -n "diverged at lr 1e30, stopped with exit 3 at step 14, resumed from step 8: "
python3 "$SCRIPTS/checks.py" steps-agree "$WORK/div" "$WORK/straight" --rtol 0 --first 1 --same-samples ||
  fail "the resumed run's losses differ from the uninterrupted run's"
for precision in bf16 fp16; do
  code=0
  train 1 "div_$precision" --set train.precision=$precision --set train.lr=1e30 --set train.max_skipped_steps=3 || code=$?
  expect_code 3 "div_$precision" "the run diverged: steps .* (3 in a row, train.max_skipped_steps is 3" $code
done
echo "bf16 and fp16 stop alike"
# A run whose last steps are non-finite, fewer than train.max_skipped_steps, ends with exit 3 too:
# it trained nothing since, and its last state, which is not saved, must not pass for a success.
code=0
train 1 div_end --set train.lr=1e30 --set train.steps=4 --set checkpoint.dir="$WORK/ck_div_end" || code=$?
expect_code 3 div_end "the run ended diverging: steps 2 to 4 had a non-finite loss or gradient norm (3 in a row" $code
grep -q "its last state, which could not train, was not saved" "$WORK/div_end.log" && [ ! -e "$WORK/ck_div_end/latest" ] ||
  { cat "$WORK/div_end.log"; ls -R "$WORK/ck_div_end"; fail "div_end: the unsaved state was not said, or was saved"; }
echo "a run ending in 3 non-finite steps (max_skipped_steps 5): exit 3, its last state unsaved"

# avg_loss after a resume between log lines (step 15, log.interval 10): the mean of steps 11-20 as
# in the straight run (the checkpoint keeps the losses since the last log line), not of 16-20.
must_train 1 avg_first --set checkpoint.dir="$WORK/ck_avg" --set checkpoint.interval=5 --set train.exit_after=15
must_train 1 avg_second --set checkpoint.dir="$WORK/ck_avg" --resume auto
python3 "$SCRIPTS/checks.py" steps-agree "$WORK/avg_second" "$WORK/straight" --rtol 1e-5 --first 20 --key avg_loss \
  --label "avg_loss after a resume at step 15" || fail "avg_loss after a resume differs"

# 2. keep 1 and a corrupt newest checkpoint.
must_train 1 keep1 --set checkpoint.dir="$WORK/ck_keep1" --set checkpoint.interval=2 --set checkpoint.keep=1 --set train.exit_after=6
python3 "$SCRIPTS/checks.py" flip-byte "$WORK/ck_keep1/step_00000006/rank_00000.bin"
must_train 1 keep1 --set checkpoint.dir="$WORK/ck_keep1" --set checkpoint.interval=2 --set checkpoint.keep=1 \
  --set train.exit_after=10 --resume auto
grep -q "refusing checkpoint .*step_00000006.*set aside" "$WORK/keep1.log" &&
  grep -q "resumed from .*step_00000004 at step 4" "$WORK/keep1.log" || { cat "$WORK/keep1.log"; fail "keep 1: no fallback"; }
must_train 1 keep1 --set checkpoint.dir="$WORK/ck_keep1" --set checkpoint.keep=1 --resume auto
grep -q "resumed from .*step_00000010 at step 10" "$WORK/keep1.log" || { cat "$WORK/keep1.log"; fail "keep 1: lost step 10"; }
[ -d "$WORK/ck_keep1/step_00000006.corrupt" ] || fail "the corrupt step_6 should be set aside, not deleted"
echo -n "keep 1, corrupt newest set aside, fell back to step 4, then resumed step 10: "
python3 "$SCRIPTS/checks.py" steps-agree "$WORK/keep1" "$WORK/straight" --rtol 1e-5 --first 1

# 3. Rollback.
must_train 1 roll --set checkpoint.dir="$WORK/ck_roll" --set checkpoint.interval=3 --set checkpoint.keep=4 --set train.exit_after=12
# The same rollback with train.steps 9 trains nothing: it changes nothing either (no checkpoint set
# aside, 'latest' and the rows as they were).
rows=$(lines "$WORK/roll/metrics.jsonl")
reports=$(cat "$WORK/roll/traffic.json" "$WORK/roll/comm_rank0.json" | sha256sum)
must_train 1 roll --set checkpoint.dir="$WORK/ck_roll" --set train.steps=9 --resume "$WORK/ck_roll/step_00000009"
grep -q "nothing to do: the run is already at step 9 of train.steps = 9" "$WORK/roll.log" &&
  [ -d "$WORK/ck_roll/step_00000012" ] && [ "$(head -1 "$WORK/ck_roll/latest")" = step_00000012 ] &&
  [ "$(lines "$WORK/roll/metrics.jsonl")" = "$rows" ] &&
  [ "$(cat "$WORK/roll/traffic.json" "$WORK/roll/comm_rank0.json" | sha256sum)" = "$reports" ] ||
  { cat "$WORK/roll.log"; ls "$WORK/ck_roll"; fail "a rollback with nothing to train changed the run"; }
must_train 1 roll --set checkpoint.dir="$WORK/ck_roll" --set checkpoint.interval=3 --set train.exit_after=10 \
  --resume "$WORK/ck_roll/step_00000009"
grep -q "set aside .*step_00000012 .*abandoned" "$WORK/roll.log" || { cat "$WORK/roll.log"; fail "step 12 not set aside"; }
grep -q '"parent": "step_00000009"' "$WORK/ck_roll/step_00000010/manifest.json" || fail "step_10's parent should be step_9"
must_train 1 roll --set checkpoint.dir="$WORK/ck_roll" --set checkpoint.interval=5 --resume auto
grep -q "resumed from .*step_00000010 at step 10" "$WORK/roll.log" || { cat "$WORK/roll.log"; fail "auto did not follow the rollback"; }
echo "rollback to step 9: step 12 set aside as abandoned, --resume auto continued from step 10"
# A hand resume from a checkpoint that is none of checkpoint.dir's own (step_12.abandoned: one set
# aside; then the same from another checkpoint.dir), stopped before its first save: the requeue's
# --resume auto continues it ('latest' names it), where it took the directory's other checkpoints
# (those of the line of training it left) or, in a new directory, started from step 0.
for dir in ck_roll ck_branch; do
  code=0
  train 1 "branch_$dir" --set checkpoint.dir="$WORK/$dir" --set checkpoint.interval=5 \
    --resume "$WORK/ck_roll/step_00000012.abandoned" --inject-fault 0:13:kill || code=$?
  [ "$code" != 0 ] || fail "branch_$dir: the fault did not stop the run"
  must_train 1 "branch_$dir" --set checkpoint.dir="$WORK/$dir" --set checkpoint.interval=5 --resume auto
  grep -q "resumed from .*ck_roll/step_00000012.abandoned at step 12" "$WORK/branch_$dir.log" ||
    { cat "$WORK/branch_$dir.log"; ls "$WORK/$dir"; fail "branch_$dir: --resume auto did not continue the hand resume"; }
  python3 "$SCRIPTS/checks.py" steps-agree "$WORK/branch_$dir" "$WORK/straight" --rtol 1e-5 --first 13 > /dev/null
done
[ -d "$WORK/ck_roll/step_00000015.abandoned" ] || { ls "$WORK/ck_roll"; fail "the line left (step_15) was not set aside"; }
echo "a hand resume from a set-aside checkpoint, and from another directory's, stopped before saving: --resume auto continued each"
# A requeued job repeats its command line, --resume PATH included: SLURM job 777 resumed step 9 by
# hand, saved steps 12 and 15 (checkpoint.keep 2 removed step 9) and was killed at step 17; its
# requeue (SLURM_RESTART_COUNT 1, the same command) goes on from step 15, where it went back to step
# 9 and set 12 and 15 aside (or, with step 9 gone, failed). Another command of the same job (another
# srun step, another line of training) resumes what it names.
must_train 1 requeue_first --set checkpoint.dir="$WORK/ck_requeue" --set checkpoint.interval=3 --set checkpoint.keep=9 \
  --set train.exit_after=9
REQUEUE=(--set checkpoint.dir="$WORK/ck_requeue" --set checkpoint.interval=3 --set checkpoint.keep=2
  --resume "$WORK/ck_requeue/step_00000009")
code=0
SLURM_JOB_ID=777 train 1 requeue "${REQUEUE[@]}" --inject-fault 0:17:kill || code=$?
[ "$code" != 0 ] || fail "requeue: the fault did not stop the first attempt"
[ ! -d "$WORK/ck_requeue/step_00000009" ] || fail "checkpoint.keep 2 should have removed step 9"
# (with nothing to train, it sets nothing aside)
SLURM_JOB_ID=777 SLURM_RESTART_COUNT=1 must_train 1 other_command --set checkpoint.dir="$WORK/ck_requeue" \
  --set train.steps=12 --resume "$WORK/ck_requeue/step_00000012"
grep -q "nothing to do: the run is already at step 12 of train.steps = 12" "$WORK/other_command.log" ||
  { cat "$WORK/other_command.log"; fail "another command of the job did not resume what it names"; }
code=0
SLURM_JOB_ID=777 SLURM_RESTART_COUNT=1 train 1 requeue "${REQUEUE[@]}" --inject-fault 0:17:kill || code=$?
[ "$code" = 0 ] || { cat "$WORK/requeue.log"; fail "the requeued attempt failed"; }
grep -q "this is a restart of job slurm:777, whose earlier attempt of this same command saved .*step_00000015" \
  "$WORK/requeue.log" && grep -q "resumed from .*step_00000015 at step 15" "$WORK/requeue.log" ||
  { cat "$WORK/requeue.log"; ls "$WORK/ck_requeue"; fail "the requeue did not continue its own step 15"; }
ls -d "$WORK"/ck_requeue/step_*.* 2> /dev/null && fail "the requeue set a checkpoint aside"
python3 "$SCRIPTS/checks.py" steps-agree "$WORK/requeue" "$WORK/straight" --rtol 1e-5 --first 10 > /dev/null
echo "a requeued hand resume (the same --resume step_9, since removed) went on from its own step 15; another command took step 12"
# A restart of a job that saved nothing on that line, its --resume PATH gone: refused (exit 2)
# before its run directory and checkpoint.dir are made.
code=0
SLURM_JOB_ID=778 SLURM_RESTART_COUNT=1 "$LOOM" train "$TINY" --run-dir "$WORK/gone_run" --set checkpoint.dir="$WORK/gone_ck" \
  --resume "$WORK/ck_requeue/step_00000009" > "$WORK/gone.log" 2>&1 || code=$?
[ "$code" = 2 ] && grep -q "resume .*step_00000009" "$WORK/gone.log" || { cat "$WORK/gone.log"; fail "a restart with PATH gone exited $code"; }
[ ! -e "$WORK/gone_run" ] && [ ! -e "$WORK/gone_ck" ] || fail "a refused restart made its run directory or checkpoint.dir"
must_train 1 window --set checkpoint.dir="$WORK/ck_window" --set checkpoint.interval=2 --set train.exit_after=4
[ -e "$WORK/ck_window/latest.publishing" ] && fail "a finished save left latest.publishing"
echo step_00000002 > "$WORK/ck_window/latest"  # what a kill between the two leaves
printf 'step_00000004\nafter step_00000002\n' > "$WORK/ck_window/latest.publishing"
must_train 1 window --set checkpoint.dir="$WORK/ck_window" --set train.exit_after=6 --resume auto
grep -q "resumed from .*step_00000004 at step 4" "$WORK/window.log" || { cat "$WORK/window.log"; fail "the last save was lost"; }
ls -d "$WORK"/ck_window/step_*.* 2> /dev/null && fail "a checkpoint was set aside"
[ -e "$WORK/ck_window/latest.publishing" ] && fail "the announcement was left"
echo "stopped before latest moved to step 4: --resume auto continued from step 4"
# The same command again (a requeued job): train.exit_after 6 is the checkpoint's step, and 5 before
# it; each would train nothing, or pass the limit by. Refused, exit 2, no checkpoint saved again.
for at in 6 5; do
  code=0
  train 1 window_again --set checkpoint.dir="$WORK/ck_window" --set train.exit_after=$at --resume auto || code=$?
  expect_code 2 window_again "train.exit_after = $at is not past the checkpoint's step 6" "$code"
done
ls -d "$WORK"/ck_window/step_*.* 2> /dev/null && fail "a checkpoint was saved again"
echo "train.exit_after at or before the checkpoint's step: refused, nothing saved again"
# train.exit_duration_mins (Megatron-LM's --exit-duration-in-mins): past its minutes (0.0001: 6 ms,
# less than a step and the set-up), every rank (dp 2) stops after the same step, saved, exit 0; the
# same command again trains a step more and stops again; without the limit the run ends as the
# straight one.
timed=(--set checkpoint.dir="$WORK/ck_timed" --set checkpoint.keep=9)
for attempt in 1 2; do
  must_train 2 timed "${timed[@]}" --set train.exit_duration_mins=0.0001 $([ $attempt = 2 ] && echo --resume auto)
  at=$(sed -n 's/.*train.exit_duration_mins 0.0001: stopped after step \([0-9]*\), .* minutes in.*/\1/p' "$WORK/timed.log" | head -1)
  [ -n "$at" ] && [ "$at" -lt 20 ] && [ -d "$WORK/ck_timed/step_$(printf %08d "$at")" ] ||
    { cat "$WORK/timed.log"; ls "$WORK/ck_timed"; fail "attempt $attempt: no stop saved after train.exit_duration_mins"; }
  [ $attempt = 1 ] && first_at=$at
done
[ "$at" -gt "$first_at" ] || fail "the second attempt (stopped after step $at) trained nothing past step $first_at"
must_train 2 timed "${timed[@]}" --resume auto
python3 "$SCRIPTS/checks.py" steps-agree "$WORK/timed" "$WORK/straight" --rtol 1e-5 --first 1 > /dev/null
echo "train.exit_duration_mins: stopped after steps $first_at and $at, saved; then ended as the straight run"
# Both at one step: train.exit_after's stop (the user's own; sbatch_example.sh requeues only the other).
must_train 1 timed_both --set checkpoint.dir="$WORK/ck_timed_both" --set train.exit_duration_mins=0.0001 --set train.exit_after=1
grep -q '"stopped_by": "train.exit_after"' "$WORK/timed_both/traffic.json" ||
  { cat "$WORK/timed_both.log"; fail "train.exit_after and the time limit at one step: not exit_after's stop"; }
code=0
train 1 timed_bad --set train.exit_duration_mins=5 || code=$?
expect_code 2 timed_bad "checkpoint.dir.*is needed by train.exit_duration_mins" "$code"
code=0
train 1 timed_bad --set checkpoint.dir="$WORK/ck_timed_bad" --set train.exit_duration_mins=-1 || code=$?
expect_code 2 timed_bad "train.exit_duration_mins.*must be 0 (never) or minutes" "$code"

# 4. Edited manifests.
must_train 1 edit --set checkpoint.dir="$WORK/ck_edit" --set checkpoint.interval=2 --set checkpoint.keep=3 --set train.exit_after=4
cp -r "$WORK/ck_edit" "$WORK/ck_edit2"
python3 - "$WORK/ck_edit/step_00000004/manifest.json" "$WORK/ck_edit2/step_00000004/manifest.json" << 'EOF'
import json, sys
offset, key = sys.argv[1:3]
m = json.load(open(offset))
for t in m["tensors"].values():  # one slice's byte offset moved by one float: the bytes would still be in the file
    if t["slices"][0]["byte_offset"] > 0:
        t["slices"][0]["byte_offset"] -= 4
        break
json.dump(m, open(offset, "w"), indent=1)
m = json.load(open(key))
del m["optimizer_steps"]
json.dump(m, open(key, "w"), indent=1)
EOF
for dir in ck_edit ck_edit2; do
  code=0
  train 1 "refuse_$dir" --resume "$WORK/$dir/step_00000004" || code=$?
  expect_code 2 "refuse_$dir" "step_00000004/manifest.json' fails its own CRC-32 check" $code
  must_train 1 "auto_$dir" --set checkpoint.dir="$WORK/$dir" --resume auto
  grep -q "resumed from .*step_00000002 at step 2" "$WORK/auto_$dir.log" || { cat "$WORK/auto_$dir.log"; fail "$dir: no fallback"; }
done
# A manifest of the format before checksums is still read, and a missing key is named.
python3 - "$WORK/ck_edit2/step_00000002/manifest.json" << 'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
m["format"] = "loom-checkpoint-1"
del m["manifest_crc32"], m["consumed_samples"]
json.dump(m, open(sys.argv[1], "w"), indent=1)
EOF
code=0
train 1 old_format --resume "$WORK/ck_edit2/step_00000002" || code=$?
expect_code 2 old_format "step_00000002/manifest.json': consumed_samples is missing" $code
echo "edited manifests refused naming the file (exit 2); --resume auto fell back"

# 5. Locks, a fresh run on old checkpoints, a finished run.
"$LOOM" train "$TINY" --run-dir "$WORK/busy" --set train.steps=100000 --set checkpoint.dir="$WORK/ck_busy" > "$WORK/busy.log" 2>&1 &
holder=$!
for _ in $(seq 600); do [ -s "$WORK/busy/metrics.jsonl" ] && break; sleep 0.1; done
code=0
train 1 busy || code=$?
expect_code 2 busy "run directory '$WORK/busy' is in use by another loom job (host $(hostname), pid $holder)" $code
code=0
train 1 busy_ck --set checkpoint.dir="$WORK/ck_busy" || code=$?
expect_code 2 busy_ck "checkpoint.dir '$WORK/ck_busy' is in use by another loom job (host $(hostname), pid $holder)" $code
kill -KILL "$holder"
wait "$holder" 2> /dev/null || true
code=0
train 1 busy || code=$?
expect_code 2 busy "run directory '$WORK/busy' holds another run's metrics.jsonl, which a fresh run would replace" $code
grep -q "taking over the lock .* of run directory '$WORK/busy' left by process $holder, no longer running" "$WORK/busy.log" ||
  { cat "$WORK/busy.log"; fail "the dead holder's lock was not taken over"; }
must_train 1 busy --overwrite-run-dir
[ ! -e "$WORK/busy/.loom-run.lock" ] || fail "a finished run should release its lock"
code=0
train 1 fresh_on_old --set checkpoint.dir="$WORK/ck_roll" || code=$?
expect_code 2 fresh_on_old "checkpoint.dir '$WORK/ck_roll' already holds checkpoints (the newest step_00000020)" $code
must_train 1 finished --set checkpoint.dir="$WORK/ck_roll" --resume auto
grep -q "nothing to do: the run is already at step 20 of train.steps = 20" "$WORK/finished.log" ||
  { cat "$WORK/finished.log"; fail "a finished run should say there is nothing to do"; }
echo "locks: a second job refused naming the holder, a dead one's lock taken over; fresh on old checkpoints refused"

# 6. A full disk.
mkdir -p "$WORK/full"
ln -s /dev/full "$WORK/full/metrics.jsonl"
code=0
train 1 full --resume auto --set checkpoint.dir="$WORK/ck_full" || code=$?
expect_code 75 full "cannot write metrics file '$WORK/full/metrics.jsonl': No space left on device" $code
echo "a full disk stops the run naming metrics.jsonl (exit 75)"
# A synchronous checkpoint whose files cannot be written (the injected fault stands for a full disk).
must_train 1 ck_full_first --set checkpoint.dir="$WORK/ck_sync_full" --set train.exit_after=2
code=0
train 1 ck_full --set checkpoint.dir="$WORK/ck_sync_full" --set checkpoint.interval=2 --set train.exit_after=4 \
  --resume auto --inject-fault 0:4:fail_save || code=$?
expect_code 75 ck_full "injected fault: writing this rank's checkpoint files failed: No space left on device (a save needs room for one checkpoint more than the checkpoint.keep = 2 kept" $code
[ "$(cat "$WORK/ck_sync_full/latest")" = step_00000002 ] || fail "the failed save must leave step 2 the newest"
echo "a synchronous checkpoint that cannot be written exits 75; step 2 stays the newest"
# What the failed save left (on a full disk it keeps the next job from writing anything) goes at the
# resume, and `latest`, which already names step 2, is not rewritten.
[ -d "$WORK/ck_sync_full/.step_00000004.tmp" ] || fail "the failed save should have left its temporary folder"
touch -d '2000-01-01' "$WORK/ck_sync_full/latest"
# (train.steps 2: resumed at step 2, nothing to train, so nothing saved that would move latest.)
must_train 1 ck_full_resume --set checkpoint.dir="$WORK/ck_sync_full" --set train.steps=2 --resume auto
grep -q "removed $WORK/ck_sync_full/.step_00000004.tmp: a save that did not finish" "$WORK/ck_full_resume.log" &&
  [ ! -e "$WORK/ck_sync_full/.step_00000004.tmp" ] || { cat "$WORK/ck_full_resume.log"; fail "the unfinished save should be removed"; }
[ "$(stat -c %Y "$WORK/ck_sync_full/latest")" = "$(date -d '2000-01-01' +%s)" ] || fail "latest already named step 2: rewritten"
echo "a resume removes what a failed save left, and leaves latest alone when it already names the checkpoint"
# A 'latest' that is a directory: rank 0's refusal reaches both ranks (exit 2, naming it), and it stays.
rm "$WORK/ck_sync_full/latest" && mkdir "$WORK/ck_sync_full/latest"
code=0
train 2 latest_dir --set checkpoint.dir="$WORK/ck_sync_full" --set parallel.timeout_s=60 --resume auto || code=$?
expect_code 2 latest_dir "'latest' is a directory" $code
[ -d "$WORK/ck_sync_full/latest" ] || fail "the directory named latest should be left alone"
echo "a 'latest' that is a directory: exit 2 naming it"
echo "unattended: ok"
