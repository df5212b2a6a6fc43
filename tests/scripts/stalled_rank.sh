#!/usr/bin/env bash
# A rank stopped by SIGSTOP under mpirun (a frozen process: its sockets stay open, nothing
# answers) ends the job within parallel.timeout_s + 30 s, exit non-zero, with the stopped rank
# named. Rank 0 also serves the rendezvous store, so stopping it silences the store as well.
# With a second argument the job is 4 ranks at dp 4 in two "nodes" of two (parallel.ranks_per_node)
# with small gradient buckets, so that the stop lands among reductions whose later steps run on a
# thread of their own (parallel/later_steps.h): hsdp (ZeRO-1, dp_shard 2) or hierarchical.
# With "save" the rank is stopped while it writes its files of a checkpoint (slow_save: a slow
# disk): the others, waiting on its files, still notice within parallel.timeout_s, not
# checkpoint.timeout_s (an hour), since a live rank keeps meeting them while it writes
# (parallel/rank_work.h). With "resume" (RANK 0) rank 0 is stopped while it checks the checkpoints
# of a resume (slow_resume: a large checkpoint's CRC on a slow disk), the others waiting on it.
# Usage: stalled_rank.sh RANK [hsdp|hierarchical|save|resume]
source "$(dirname "$0")/common.sh"
stopped="$1"
timeout_s=5
bound=$((timeout_s + 30))
layout=(-np 3)
sets=(--set train.global_batch_size=6)
case "${2:-}" in
  "") ;;
  hsdp | hierarchical)
    layout=(-np 4)
    sets=(--set train.global_batch_size=8 --set parallel.ranks_per_node=2 --set parallel.bucket_mb=0.01)
    [ "$2" = hsdp ] && sets+=(--set parallel.zero_stage=1 --set parallel.dp_shard=2)
    [ "$2" = hierarchical ] && sets+=(--set parallel.dp_collectives=hierarchical)
    ;;
  save) sets+=(--set checkpoint.dir="$WORK/ck" --set checkpoint.interval=3 --inject-fault "$stopped:3:slow_save:600000") ;;
  resume)
    sets+=(--set checkpoint.dir="$WORK/ck" --set checkpoint.interval=2)
    mpirun --oversubscribe "${layout[@]}" "$LOOM" train "$TINY" --run-dir "$WORK/run" --set train.steps=100000 \
      "${sets[@]}" --set train.exit_after=2 > "$WORK/first.log" 2>&1 || { cat "$WORK/first.log"; fail "the first run failed"; }
    sets+=(--resume auto --inject-fault "$stopped:1:slow_resume:600000")
    ;;
  *) fail "unknown layout '$2' (hsdp, hierarchical, save or resume)" ;;
esac

mpirun --oversubscribe "${layout[@]}" "$LOOM" train "$TINY" --run-dir "$WORK/run" --set train.steps=100000 \
  "${sets[@]}" --set log.interval=1 --set parallel.timeout_s=$timeout_s > "$WORK/job.log" 2>&1 &
job=$!
# Stopped once training runs (rank 0 has logged step 2), so the stop lands in a step's collectives;
# with "save", once the rank has said it is in its slow write.
if [ "${2:-}" = save ] || [ "${2:-}" = resume ]; then
  for _ in $(seq 600); do
    grep -q "\[loom rank $stopped\] injected fault: \(writing this rank's checkpoint files\|checking the checkpoints of this resume\) takes" "$WORK/job.log" && break
    kill -0 "$job" 2> /dev/null || { cat "$WORK/job.log"; fail "the job ended before the slow save or resume"; }
    sleep 0.1
  done
else
  wait_for_step2 "$WORK/job.log" "$job"
fi
# mpirun's children are the ranks; each knows its rank from the environment mpirun gave it.
ranks=$(pgrep -P "$job")
pid=""
for p in $ranks; do
  if [ "$(tr '\0' '\n' < "/proc/$p/environ" | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')" = "$stopped" ]; then pid=$p; fi
done
[ -n "$pid" ] || { kill "$job"; fail "no process of rank $stopped among mpirun's children ($ranks)"; }
kill -STOP "$pid"
start=$(date +%s.%N)
SECONDS=0

# The job must end on its own; past 120 s this script ends it, and fails.
code=""
while [ "$SECONDS" -lt 120 ]; do
  kill -0 "$job" 2> /dev/null || { code=0; wait "$job" || code=$?; break; }
  sleep 0.1
done
seconds=$(python3 -c "import time; print(round(time.time() - $start, 1))")
cat "$WORK/job.log"
if [ -z "$code" ]; then
  kill "$job"
  wait "$job" || true
  fail "the job still ran $seconds s after rank $stopped was stopped"
fi
[ "$code" != 0 ] || fail "the job exited 0 with rank $stopped stopped"
python3 -c "import sys; sys.exit(0 if $seconds <= $bound else 1)" ||
  fail "the job ended $seconds s after rank $stopped was stopped, more than parallel.timeout_s + 30 = $bound s"
grep -q "loom: error: .*failed on global rank .*rank $stopped stopped answering" "$WORK/job.log" ||
  fail "no error names rank $stopped as the one that stopped answering"
# mpirun kills every rank, the stopped one too.
for _ in $(seq 100); do
  alive=$(ps -o stat= -p $ranks | grep -vc Z || true)
  [ "$alive" = 0 ] && break
  sleep 0.1
done
[ "$alive" = 0 ] || { kill -9 $ranks; fail "ranks left running after the job ended: $(ps -o pid=,stat= -p $ranks)"; }
echo "stalled rank $stopped${2:+ ($2)}: the job ended $seconds s after the stop (bound $bound s), exit $code, rank $stopped named"
