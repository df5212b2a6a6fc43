#!/usr/bin/env bash
# A rank stopped before it starts (SIGSTOP before loom runs, so it never reaches MPI_Init) under
# mpirun: the other rank's MPI_Init, which has no timeout of its own, would wait for it for ever.
# loom's start-up watchdog ends that rank after parallel.timeout_s (exit 1, naming MPI's
# start-up), mpirun ends the job, and no rank is left behind.
source "$(dirname "$0")/common.sh"
timeout_s=5
ARGS=("$LOOM" train "$TINY" --run-dir "$WORK/run" --set parallel.timeout_s=$timeout_s)
start=$(date +%s)
code=0
timeout 120 mpirun --oversubscribe -np 1 "${ARGS[@]}" : -np 1 sh -c 'kill -STOP $$; exec "$@"' sh "${ARGS[@]}" \
  > "$WORK/job.log" 2>&1 || code=$?
seconds=$(($(date +%s) - start))
[ "$code" = 124 ] && { cat "$WORK/job.log"; fail "the job hung (killed by timeout after 120 s)"; }
[ "$code" != 0 ] || { cat "$WORK/job.log"; fail "the job exited 0"; }
grep -q "MPI's start-up .* did not finish within parallel.timeout_s = $timeout_s s" "$WORK/job.log" ||
  { cat "$WORK/job.log"; fail "no start-up timeout named"; }
sleep 1
pgrep -f -- "--run-dir $WORK/run" > /dev/null && { pgrep -af -- "--run-dir $WORK/run"; fail "ranks left running"; }
echo "startup stall: the job ended $seconds s after start (parallel.timeout_s $timeout_s), exit $code"
