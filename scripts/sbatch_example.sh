#!/usr/bin/env bash
# An example SLURM batch job: loom over 2 nodes x 8 GPUs, one rank per GPU, that resumes from its
# newest checkpoint whenever it starts and goes back into the queue when it is preempted or about
# to reach its time limit. Submit from the repository (the job starts in the submission directory):
#
#   sbatch scripts/sbatch_example.sh CONFIG.yaml [loom train arguments...]
#
#SBATCH --job-name=loom
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --time=24:00:00
#SBATCH --requeue
#SBATCH --signal=B:USR1@300
#SBATCH --open-mode=append
#SBATCH --output=loom-%j.out
#
# What each line is for:
# - --ntasks-per-node = --gpus-per-node: srun starts one loom rank per GPU; loom reads its rank, the
#   world and its local rank from SLURM_* (README "Several processes"), and with train.device cuda
#   puts local rank i on GPU i. Every task must see all of its node's GPUs: no --gpus-per-task or
#   --gpu-bind, which would show each task one.
# - --requeue: a preempted job goes back into the queue rather than ending. SLURM sends SIGTERM to
#   every task first (and SIGKILL after the partition's GraceTime): loom finishes the step in
#   flight, saves a checkpoint and exits 0 (launch/stop_signals.h); set GraceTime longer than a
#   step plus a save.
# - --signal=B:USR1@300: 300 s (give or take SLURM's 60 s resolution) before --time runs out, USR1 to
#   this script alone, which sends SIGTERM to the tasks, waits for their save and requeues the job
#   itself. Without it the job would be killed at the limit, losing the steps since the last save.
# - --open-mode=append: a requeued run appends to the first run's output file.
# A run that failed (a crashed rank, a dead peer) after saving a new checkpoint is requeued too,
# at most MAX_REQUEUES (default 3) times; one that saved nothing (a crash at start-up) would only
# fail again, and is not, nor is loom's exit 2 (bad input) or 3 (the run diverged). A run that
# train.exit_duration_mins stopped (saved, exit 0, and traffic.json's stopped_by says so) is requeued.
#
# Every start, the first and each requeue (SLURM_RESTART_COUNT 1, 2, ...), runs the same line:
# --resume auto continues from the newest complete checkpoint, or starts fresh when there is none.
# Set checkpoint.interval in the config: a job that dies without warning (a node failure)
# restarts from the last interval's checkpoint.
#
# Paths (docs/multi_node.md says what must be shared): CHECKPOINT_DIR must be on a filesystem
# every node sees, since every rank writes its own rank_NNNNN.bin into it and rank 0 publishes the
# step; so must the config, data.path and the executable be. RUN_DIR (metrics.jsonl, config.yaml)
# is rank 0's. Both default to directories in the submission directory named by the job id, which
# a requeue keeps; set CHECKPOINT_DIR to continue another job's run. LOOM names the executable
# when it is not build/loom.
set -uo pipefail
config="${1:?usage: sbatch scripts/sbatch_example.sh CONFIG.yaml [loom train arguments...]}"
shift
checkpoint_dir="${CHECKPOINT_DIR:-$PWD/checkpoints/loom-$SLURM_JOB_ID}"
run_dir="${RUN_DIR:-$PWD/runs/loom-$SLURM_JOB_ID}"
loom="${LOOM:-build/loom}"

time_is_up=0
# The time limit is near: the tasks save and stop (SIGTERM), then the job is requeued below.
on_time_limit() {
  time_is_up=1
  scancel --signal=TERM "$SLURM_JOB_ID"  # every step's tasks; not this script
}
trap on_time_limit USR1
# Preemption sends SIGTERM to this script too: it must keep waiting while the tasks save.
trap 'echo "sbatch_example: SIGTERM, the tasks are saving"' TERM

echo "sbatch_example: job $SLURM_JOB_ID, restart ${SLURM_RESTART_COUNT:-0}, checkpoints in $checkpoint_dir"
latest_before="$(cat "$checkpoint_dir/latest" 2> /dev/null || true)"
# In the background: bash runs a trap only between commands, and `wait` returns as a signal arrives.
srun --kill-on-bad-exit=1 "$loom" train "$config" --resume auto --run-dir "$run_dir" \
  --set checkpoint.dir="$checkpoint_dir" "$@" &
srun_pid=$!
wait "$srun_pid"
status=$?
while kill -0 "$srun_pid" 2> /dev/null; do  # a trap interrupted the wait: keep waiting for the save
  wait "$srun_pid"
  status=$?
done

restarts="${SLURM_RESTART_COUNT:-0}"
latest="$(cat "$checkpoint_dir/latest" 2> /dev/null || true)"
if [ "$time_is_up" = 1 ] && [ "$status" = 0 ]; then
  echo "sbatch_example: saved before the time limit; requeueing job $SLURM_JOB_ID"
  scontrol requeue "$SLURM_JOB_ID"
elif [ "$status" = 0 ] && grep -q '"stopped_by": "train.exit_duration_mins"' "$run_dir/traffic.json" 2> /dev/null; then
  # train.exit_duration_mins (Megatron-LM's --exit-duration-in-mins) saved and stopped the run
  # before --time ran out, the scheduler's clock in its own hands: go on in a new allocation.
  echo "sbatch_example: saved at train.exit_duration_mins; requeueing job $SLURM_JOB_ID"
  scontrol requeue "$SLURM_JOB_ID"
elif [ "$status" = 2 ] || [ "$status" = 3 ]; then
  # loom's own verdicts (README, exit codes): bad input, or a run that diverged. A requeue would
  # resume the same state and fail the same way: the user decides.
  echo "sbatch_example: loom exited $status ($([ "$status" = 2 ] && echo "bad input" || echo "the run diverged")); not requeued"
elif [ "$status" != 0 ] && [ "$latest" != "$latest_before" ] && [ "$restarts" -lt "${MAX_REQUEUES:-3}" ]; then
  echo "sbatch_example: srun failed with status $status after saving $latest; requeueing job $SLURM_JOB_ID" \
    "(restart $((restarts + 1)) of ${MAX_REQUEUES:-3})"
  scontrol requeue "$SLURM_JOB_ID"
elif [ "$status" != 0 ]; then
  echo "sbatch_example: srun failed with status $status; not requeued (no new checkpoint, or $restarts restarts)"
fi
exit "$status"
