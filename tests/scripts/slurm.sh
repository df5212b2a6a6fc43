#!/usr/bin/env bash
# srun and sbatch end to end on a private one-node SLURM cluster (tests/scripts/private_slurm.sh):
#  1. srun -n 4 at tp=2 dp=2, from SLURM's variables alone, gives mpirun -np 4's losses within 1e-5
#     (and loom verify under srun -n 2 finds tp=2 equal to one process)
#     (the tolerance dp_equivalence.sh holds both launchers to); the store is on the node list's
#     first host at port 10000 + SLURM_JOB_ID % 20000.
#  2. MASTER_ADDR and MASTER_PORT win over SLURM's variables; mpirun and torchrun inside an srun
#     step win over the step's variables.
#  3. A SLURM variable that contradicts the others is refused naming it: exit 2, through srun; a
#     bad config exits 2 and a diverged run 3 through srun --kill-on-bad-exit.
#  4. loom run straight from a batch script (no srun) is one process, not task 0 of SLURM_NTASKS.
#  5. scripts/sbatch_example.sh (a job stopped by train.exit_duration_mins at each start is requeued
#     until done): a rank killed at step 13 on the first start fails the job, which
#     requeues itself; the second start (SLURM_RESTART_COUNT 1, no fault) resumes from step 10 and
#     its steps 11-20 equal the uninterrupted run's. A bad config fails without a requeue.
#  6. A rank stopped (SIGSTOP) under srun --kill-on-bad-exit=1, as the README launches: its peers
#     time out and exit non-zero, and srun ends the step, the stopped task too (without the flag srun
#     waits for the stopped task forever).
source "$(dirname "$0")/common.sh"
source "$SCRIPTS/private_slurm.sh"
trap 'stop_private_slurm; rm -rf "$WORK"' EXIT
# A CI job that itself runs under SLURM must not hand its allocation's variables to our srun.
for variable in $(compgen -e | grep -E '^(SLURM_|SBATCH_|SRUN_|SALLOC_)' || true); do unset "$variable"; done
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT

LAYOUT=(--set parallel.tp=2 --set parallel.timeout_s=60)
# The first job's port is 10000 + job id % 20000 (below the kernel's ephemeral ports, so not one
# free_port gives): start the job ids where such a port is free.
port="$(python3 -c 'import random, socket
for _ in range(1000):
    port = random.randrange(10001, 30000)
    try:
        socket.socket().bind(("127.0.0.1", port))
        print(port)
        break
    except OSError:
        pass')"
[ -n "$port" ] || fail "no free port in 10001-29999"
start_private_slurm "$WORK/slurm" $((port - 10000))
node="$(hostname -s)"
# One failed task ends the step at once: its peers would otherwise wait for it until parallel.timeout_s.
SRUN=(srun --kill-on-bad-exit=1)

# must NAME COMMAND...: runs COMMAND with its output in $WORK/NAME.log; fails showing it unless it exits 0.
must() {
  local name="$1"
  shift
  local code=0
  "$@" > "$WORK/$name.log" 2>&1 < /dev/null || code=$?
  [ "$code" = 0 ] || { cat "$WORK/$name.log"; fail "$name exited $code"; }
}
expect_line() {  # expect_line NAME PATTERN: $WORK/NAME.log has a line matching PATTERN
  grep -q -- "$2" "$WORK/$1.log" || { cat "$WORK/$1.log"; fail "$1: no line matching '$2'"; }
}

# 1. srun against mpirun, the same layout.
must srun "${SRUN[@]}" -n 4 "$LOOM" train "$TINY" --run-dir "$WORK/srun" "${LAYOUT[@]}"
expect_line srun "4 ranks (slurm launch) | tp=2 pp=1 dp=2 cp=1 ep=1"
expect_line srun "rendezvous: TCPStore at $node:$port, served by rank 0"
run_loom 4 mpirun "${LAYOUT[@]}" || { cat "$WORK/mpirun.log"; fail "mpirun -np 4"; }
echo -n "srun -n 4 vs mpirun -np 4 at tp=2 dp=2: "
compare_losses "$WORK/srun" "$WORK/mpirun" || fail "srun's losses differ from mpirun's"
# loom verify through srun: task 0 trains the one-process reference without SLURM's variables. On a
# port known free (MASTER_PORT wins over SLURM's, section 2): the one SLURM's job id gives this later
# job lies in the ephemeral range, where a connection of the runs before may hold it (EADDRINUSE,
# seen once in a fresh clone).
must srun_verify env MASTER_ADDR=127.0.0.1 MASTER_PORT="$(free_port)" \
  "${SRUN[@]}" -n 2 "$LOOM" verify "$TINY" --run-dir "$WORK/srun_verify" "${LAYOUT[@]}"
expect_line srun_verify "^verdict: equal within"
echo "srun -n 2 loom verify at tp=2: $(grep '^verdict:' "$WORK/srun_verify.log")"

# 2. What wins over SLURM's variables.
SHORT=(--set train.steps=2 --set train.warmup_steps=1 --set train.global_batch_size=4 --set parallel.timeout_s=60)
override_port="$(free_port)"
must override env MASTER_ADDR=127.0.0.1 MASTER_PORT="$override_port" \
  "${SRUN[@]}" -n 2 "$LOOM" train "$TINY" --run-dir "$WORK/override" "${SHORT[@]}"
expect_line override "rendezvous: TCPStore at 127.0.0.1:$override_port, served by rank 0"
must torchrun_in_srun "${SRUN[@]}" -n 1 torchrun \
  --nproc_per_node 2 --master_port "$(free_port)" --no_python "$LOOM" train "$TINY" --run-dir "$WORK/tr" "${SHORT[@]}"
expect_line torchrun_in_srun "2 ranks (torchrun launch)"
must mpirun_in_srun "${SRUN[@]}" -n 1 mpirun --oversubscribe -np 2 "$LOOM" train "$TINY" --run-dir "$WORK/mr" "${SHORT[@]}"
expect_line mpirun_in_srun "2 ranks (mpirun launch)"

# 3. A contradiction among SLURM's variables: exit 2 naming the variable, through srun's status.
code=0
# Plain srun: every task exits 2 by itself, and --kill-on-bad-exit could end some first (status 143).
srun -n 2 env SLURM_STEP_TASKS_PER_NODE=3 "$LOOM" train "$TINY" --run-dir "$WORK/bad" > "$WORK/bad.log" 2>&1 < /dev/null ||
  code=$?
[ "$code" = 2 ] || { cat "$WORK/bad.log"; fail "contradicting SLURM_STEP_TASKS_PER_NODE: exit $code, expected 2"; }
expect_line bad "SLURM_STEP_TASKS_PER_NODE='3' adds up to 3 tasks, but SLURM_NTASKS is 2"
# A bad config through srun --kill-on-bad-exit=1 exits 2: the first rank to refuse it ends the
# step, and the SIGTERM srun sends the others, some still loading LibTorch, is held until each has
# refused it too (launch/stop_signals.h). Three tries each of train and verify (whose layout run
# is a train): the others' start-up is what varies. Before verify held them, 1 of 6 tries gave 143.
for command in train train train verify verify verify; do
  code=0
  "${SRUN[@]}" -n 4 "$LOOM" "$command" "$TINY" --run-dir "$WORK/bad_k" --set parallel.tp=3 > "$WORK/bad_k.log" \
    2>&1 < /dev/null || code=$?
  [ "$code" = 2 ] || { cat "$WORK/bad_k.log"; fail "a bad config under srun -K1: loom $command exited $code, expected 2"; }
  expect_line bad_k "loom: error: config key 'parallel.tp'"
done
# A diverged run exits 3 through srun --kill-on-bad-exit=1: the ranks still exiting when the first
# has gone ignore the SIGTERM srun sends them, which would make srun's status 143.
code=0
"${SRUN[@]}" -n 4 "$LOOM" train "$TINY" --run-dir "$WORK/diverged" --set parallel.dp=4 --set train.lr=1e30 \
  --set train.max_skipped_steps=1 --set train.steps=4 --set train.warmup_steps=1 > "$WORK/diverged.log" 2>&1 < /dev/null || code=$?
[ "$code" = 3 ] || { cat "$WORK/diverged.log"; fail "a diverged run under srun: exit $code, expected 3"; }
echo "MASTER_ADDR/MASTER_PORT, torchrun and mpirun win over SLURM's variables; a contradiction exits 2 naming it;" \
  "a bad config exits 2 (train and verify) and divergence 3 through srun -K1"

# 4. The batch script itself is no task of a step.
must batch_plain sbatch --wait --ntasks=2 --output="$WORK/batch_plain.out" \
  --wrap="'$LOOM' train '$TINY' --run-dir '$WORK/batch_plain' ${SHORT[*]}"
grep -q "1 ranks (plain launch)" "$WORK/batch_plain.out" || { cat "$WORK/batch_plain.out"; fail "loom in a batch script"; }

# 5. The example batch job: killed on its first start, requeued, resumed, finished.
example() {  # example NAME [loom train arguments...]: submits scripts/sbatch_example.sh; prints the job id
  local name="$1"
  shift
  # Two jobs run at once: each its own free port (10000 + job id % 20000 is tested above).
  (cd "$LOOM_SOURCE" && CHECKPOINT_DIR="$WORK/${name}_ck" RUN_DIR="$WORK/${name}_run" MASTER_PORT="$(free_port)" \
    sbatch --parsable --nodes=1 --ntasks-per-node=4 --gpus-per-node=0 --output="$WORK/$name.out" \
    scripts/sbatch_example.sh "$TINY" "${LAYOUT[@]}" "$@")
}
final_state() {  # final_state JOB: waits for the job to end; prints its state and restarts
  local show=""
  for _ in $(seq 600); do  # a job takes seconds; 120 s only guards against a hang
    show="$(scontrol show job "$1")"
    case "$show" in *JobState=COMPLETED* | *JobState=FAILED* | *JobState=CANCELLED* | *JobState=TIMEOUT*) break ;; esac
    sleep 0.2
  done
  echo "$show" | grep -o -E 'JobState=[A-Z_]+|Restarts=[0-9]+' | tr '\n' ' '
}
job="$(example sbatch --set checkpoint.interval=5 --inject-fault 1:13:kill)"
bad_job="$(example sbatch_bad --set train.steps=0)"
# train.exit_duration_mins 0.0001 (6 ms) stops each start after one step, saved: requeued twice, then done.
timed_job="$(example sbatch_timed --set train.steps=3 --set train.warmup_steps=1 --set train.exit_duration_mins=0.0001)"
state="$(final_state "$job")"
[ "$state" = "JobState=COMPLETED Restarts=1 " ] ||
  { cat "$WORK/sbatch.out"; fail "the example job ended $state, expected COMPLETED after one requeue"; }
state="$(final_state "$bad_job")"
[ "$state" = "JobState=FAILED Restarts=0 " ] && grep -q "not requeued" "$WORK/sbatch_bad.out" ||
  { cat "$WORK/sbatch_bad.out"; fail "the example job with a bad config ended $state, expected FAILED, not requeued"; }
for pattern in "injected fault: kill at step 13" "srun failed with status .* after saving step_00000010; requeueing job $job (restart 1 of 3)" \
  "resumed from .*step_00000010 at step 10" "done: 10 steps"; do
  grep -q -- "$pattern" "$WORK/sbatch.out" || { cat "$WORK/sbatch.out"; fail "the example job's output lacks '$pattern'"; }
done
[ "$(grep -c "injected fault" "$WORK/sbatch.out")" = 1 ] || fail "the fault fired again after the requeue"
state="$(final_state "$timed_job")"
[ "$state" = "JobState=COMPLETED Restarts=2 " ] &&
  [ "$(grep -c "saved at train.exit_duration_mins; requeueing job $timed_job" "$WORK/sbatch_timed.out")" = 2 ] &&
  grep -q "resumed from .*step_00000002 at step 2" "$WORK/sbatch_timed.out" ||
  { cat "$WORK/sbatch_timed.out"; fail "the example job stopped by train.exit_duration_mins ended $state, expected COMPLETED after two requeues"; }
# The last ten records are the second start's, whether the resumed run appended or started the file anew.
mkdir "$WORK/sbatch_resumed"
tail -n 10 "$WORK/sbatch_run/metrics.jsonl" > "$WORK/sbatch_resumed/metrics.jsonl"
compare_resumed "$WORK/sbatch_resumed" "$WORK/srun" 11 20 "sbatch_example.sh, killed at step 13, requeued" ||
  fail "the requeued job's losses differ from the uninterrupted run's"
# 6. A stopped rank under srun --kill-on-bad-exit=1 ends the step.
"${SRUN[@]}" -n 3 "$LOOM" train "$TINY" --run-dir "$WORK/stall" --set train.steps=100000 --set log.interval=1 \
  --set train.global_batch_size=6 --set parallel.timeout_s=5 > "$WORK/stall.log" 2>&1 < /dev/null &
stall_job=$!
wait_for_step2 "$WORK/stall.log" "$stall_job"
stopped=""
for p in $(pgrep -f -- "--run-dir $WORK/stall"); do
  [ "$(tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null | sed -n 's/^SLURM_PROCID=//p')" = 1 ] && stopped=$p
done
[ -n "$stopped" ] || { kill "$stall_job"; cat "$WORK/stall.log"; fail "no task of rank 1 found"; }
kill -STOP "$stopped"
SECONDS=0
code=""
while [ "$SECONDS" -lt 120 ]; do  # a guard against a hang, not a timing: it ends in about timeout_s
  kill -0 "$stall_job" 2> /dev/null || { code=0; wait "$stall_job" || code=$?; break; }
  sleep 0.2
done
[ -n "$code" ] || { kill -9 "$stopped"; kill "$stall_job"; cat "$WORK/stall.log"; fail "srun still ran 120 s after rank 1 stopped"; }
[ "$code" != 0 ] || fail "srun exited 0 with rank 1 stopped"
kill -0 "$stopped" 2> /dev/null && { kill -9 "$stopped"; fail "the stopped task outlived the step"; }
grep -q "rank 1 stopped answering" "$WORK/stall.log" || { cat "$WORK/stall.log"; fail "no error names rank 1"; }
echo "6. a stopped rank under srun --kill-on-bad-exit=1: the step ended (exit $code), rank 1 named"
echo "slurm: ok"
