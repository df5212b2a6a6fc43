#!/usr/bin/env bash
# train.step_timeout_s (launch/step_watchdog.h): a stall that holds every rank outside the collectives
# (here the data read that never returns, --inject-fault RANK:STEP:slow-data:MS, on the one rank of a
# one-process job) ends the job, exit 1, naming the step and what the rank was doing, where it sat
# for ever before; the automatic limit does so too; under mpirun the stalled rank ends the job before
# parallel.timeout_s. A slow save is not a stall (checkpoint.timeout_s bounds it), nor is a job
# stopped and continued (SIGSTOP, as SLURM's `scontrol suspend`). A bad value exits 2.
source "$(dirname "$0")/common.sh"

# ends_within SECONDS NAME COMMAND...: COMMAND in the background, its output in $WORK/NAME.log; fails
# if it still runs after SECONDS; sets CODE to its exit code.
ends_within() {
  local most="$1" name="$2" pid
  shift 2
  "$@" > "$WORK/$name.log" 2>&1 &
  pid=$!
  SECONDS=0
  while kill -0 "$pid" 2> /dev/null; do
    if [ "$SECONDS" -ge "$most" ]; then
      kill -9 "$pid" 2> /dev/null || true
      cat "$WORK/$name.log"
      fail "$name: still running after $most s"
    fi
    sleep 0.1
  done
  CODE=0
  wait "$pid" || CODE=$?
}

expect_in() {  # LOG PATTERN: LOG holds PATTERN (grep -E)
  grep -Eq -- "$2" "$1" || { cat "$1"; fail "$1 does not say '$2'"; }
}

stalled=(--inject-fault 0:3:slow-data:3600000 --set train.steps=100000 --set log.interval=1)

# 1. A fixed limit: the data read of step 3 never returns.
ends_within 120 fixed "$LOOM" train "$TINY" --run-dir "$WORK/fixed" "${stalled[@]}" --set train.step_timeout_s=2
[ "$CODE" = 1 ] || { cat "$WORK/fixed.log"; fail "the stalled job exited $CODE, expected 1"; }
expect_in "$WORK/fixed.log" "loom: error: step 3 made no progress for [0-9.]+ s \(train.step_timeout_s = 2\): this rank was reading data"
[ "$(wc -l < "$WORK/fixed/metrics.jsonl")" = 2 ] || fail "the stalled job's metrics.jsonl should hold steps 1 and 2"

# 2. The automatic limit (parallel.timeout_s 1: the largest of 2 s, 21 s and 10 x the slowest step).
ends_within 120 automatic "$LOOM" train "$TINY" --run-dir "$WORK/automatic" "${stalled[@]}" --set parallel.timeout_s=1
[ "$CODE" = 1 ] || { cat "$WORK/automatic.log"; fail "the stalled job exited $CODE, expected 1"; }
expect_in "$WORK/automatic.log" "loom: error: step 3 made no progress for [0-9.]+ s \(train.step_timeout_s automatic: the largest of 2 x parallel.timeout_s, parallel.timeout_s \+ 20 s and 10 x the slowest step so far"

# 3. mpirun: rank 1's data stalls; its watchdog (3 s) ends the job long before parallel.timeout_s (120 s).
ends_within 90 mpirun mpirun --oversubscribe -np 2 "$LOOM" train "$TINY" --run-dir "$WORK/mpirun" \
  --inject-fault 1:3:slow-data:3600000 --set train.steps=100000 --set train.global_batch_size=4 \
  --set train.micro_batch_size=2 --set train.step_timeout_s=3 --set parallel.timeout_s=120
[ "$CODE" != 0 ] || { cat "$WORK/mpirun.log"; fail "the stalled mpirun job exited 0"; }
expect_in "$WORK/mpirun.log" "loom: error: step 3 made no progress .*this rank was reading data.*\(rank 1 of 2\)"

# 3b. The log on a pipe that no one reads (a launcher's, a stalled file system's): the main thread
# blocks writing a log line while holding stdout's lock; the watchdog's report takes no such lock.
mkfifo "$WORK/out.fifo"
exec 3<> "$WORK/out.fifo" # held open and never read: once its 64 KiB fill, loom's writes block
"$LOOM" train "$TINY" --run-dir "$WORK/blocked" --set train.steps=1000000 --set log.interval=1 \
  --set train.step_timeout_s=2 > "$WORK/out.fifo" 2> "$WORK/blocked.err" &
pid=$!
SECONDS=0
while kill -0 "$pid" 2> /dev/null; do
  [ "$SECONDS" -lt 120 ] || { kill -9 "$pid"; cat "$WORK/blocked.err"; fail "a log blocked on its pipe hung the job"; }
  sleep 0.1
done
code=0
wait "$pid" || code=$?
exec 3>&-
[ "$code" = 1 ] || { cat "$WORK/blocked.err"; fail "the job with its log blocked exited $code, expected 1"; }
expect_in "$WORK/blocked.err" "loom: error: step [0-9]+ made no progress for [0-9.]+ s \(train.step_timeout_s = 2\): this rank was ending the step"

# 4. A save slower than the limit is not a stall (paused: checkpoint.timeout_s bounds it).
ends_within 120 save "$LOOM" train "$TINY" --run-dir "$WORK/save" --set train.steps=6 \
  --set checkpoint.dir="$WORK/ck" --set checkpoint.interval=2 --inject-fault 0:2:slow_save:4000 \
  --set train.step_timeout_s=1
[ "$CODE" = 0 ] || { cat "$WORK/save.log"; fail "a slow save ended the job ($CODE)"; }
expect_in "$WORK/save.log" "injected fault: writing this rank's checkpoint files takes 4000 ms longer"

# 5. Stopped for three times the limit and continued: not a stall. (Stopped with steps still to
# train: the log grows after SIGCONT.)
"$LOOM" train "$TINY" --run-dir "$WORK/suspended" --set train.steps=3000 --set log.interval=1 \
  --set train.step_timeout_s=4 > "$WORK/suspended.log" 2>&1 &
job=$!
wait_for_step2 "$WORK/suspended.log" "$job"
kill -STOP "$job"
logged=$(wc -l < "$WORK/suspended.log")
sleep 12
kill -CONT "$job"
code=0
wait "$job" || code=$?
[ "$code" = 0 ] || { cat "$WORK/suspended.log"; fail "a job stopped and continued exited $code"; }
[ "$(wc -l < "$WORK/suspended.log")" -gt $((logged + 10)) ] || fail "the job had finished before it was stopped"

# 6. Bad values name the key.
for bad in -1 nan 0.5; do
  expect_exit 2 "train.step_timeout_s" "$LOOM" train "$TINY" --run-dir "$WORK/bad" --set train.step_timeout_s=$bad
done
echo "step_watchdog: OK"
