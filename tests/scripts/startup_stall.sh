#!/usr/bin/env bash
# A rank stopped before it starts (SIGSTOP before loom runs, so it never reaches MPI_Init) under
# mpirun: the other rank's MPI_Init, which has no timeout of its own, would wait for it for ever.
# loom's start-up watchdog ends that rank after parallel.timeout_s (exit 1, naming MPI's
# start-up), mpirun ends the job, and no rank is left behind. Under a plain launch, a MASTER_PORT
# that accepts and never answers ends rank 1 the same way, naming the store; RANK without
# WORLD_SIZE is refused (exit 2), and so is a MASTER_PORT in use on rank 0's host.
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

# The same under a plain launch (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT): MASTER_PORT held by a
# program that accepts and never answers (rank 0 stopped once it listened looks the same). c10d's
# first exchange with the store has no timeout: rank 1 waited for ever. It ends at
# parallel.timeout_s and a second, naming the store's address (the bound checked, timeout_s + 20,
# leaves room for a loaded machine and still tells it from the hang).
port=$(free_port)
python3 -c "import socket, sys, time; s = socket.socket(); s.bind(('127.0.0.1', $port)); s.listen()
open('$WORK/listening', 'w').close(); time.sleep(60)" &
listener=$!
for _ in $(seq 300); do [ -e "$WORK/listening" ] && break; sleep 0.1; done
start=$(date +%s)
code=0
RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout 60 "$LOOM" train "$TINY" --run-dir "$WORK/silent" \
  --set parallel.timeout_s=$timeout_s > "$WORK/silent.log" 2>&1 || code=$?
seconds=$(($(date +%s) - start))
kill "$listener" 2> /dev/null || true
[ "$code" = 124 ] && { cat "$WORK/silent.log"; fail "rank 1 hung on a silent store (killed after 60 s)"; }
[ "$code" = 1 ] && grep -q "rendezvous store at 127.0.0.1:$port did not finish within parallel.timeout_s" "$WORK/silent.log" &&
  [ "$seconds" -le $((timeout_s + 20)) ] || { cat "$WORK/silent.log"; fail "silent store: exit $code after $seconds s"; }
echo "a silent store at MASTER_PORT: rank 1 ended $seconds s after start (parallel.timeout_s $timeout_s), exit $code"
# MASTER_PORT held on rank 0's host: rank 0 cannot serve the store. It said it tried for
# parallel.timeout_s (it had not) and exited 1; the port is the user's to change (exit 2, named).
port=$(free_port)
python3 -c "import socket, time; s = socket.socket(); s.bind(('127.0.0.1', $port)); s.listen()
open('$WORK/held_ready', 'w').close(); time.sleep(60)" &
listener=$!
for _ in $(seq 300); do [ -e "$WORK/held_ready" ] && break; sleep 0.1; done
code=0
RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout 60 "$LOOM" train "$TINY" --run-dir "$WORK/held" \
  --set parallel.timeout_s=$timeout_s > "$WORK/held.log" 2>&1 || code=$?
kill "$listener" 2> /dev/null || true
[ "$code" = 2 ] && grep -q "rank 0 could not serve the rendezvous store at 127.0.0.1:$port: the port is in use on this host" \
  "$WORK/held.log" && grep -q "give the job a free MASTER_PORT" "$WORK/held.log" ||
  { cat "$WORK/held.log"; fail "MASTER_PORT in use on rank 0's host: exit $code"; }
echo "MASTER_PORT in use on rank 0's host: exit 2, naming the port"
# RANK without WORLD_SIZE (one process of several whose WORLD_SIZE was left out) would train alone.
code=0
env -u WORLD_SIZE RANK=1 "$LOOM" train "$TINY" --run-dir "$WORK/alone" > "$WORK/alone.log" 2>&1 || code=$?
[ "$code" = 2 ] && grep -q "RANK=1 is set but WORLD_SIZE is not" "$WORK/alone.log" ||
  { cat "$WORK/alone.log"; fail "RANK without WORLD_SIZE: exit $code"; }
echo "RANK without WORLD_SIZE: exit 2"
# Ranks given different WORLD_SIZEs: rank 0 (2) names WORLD_SIZE, after parallel.timeout_s (it
# waited a fixed 30 s for the other to read the verdict, and named no key).
port=$(free_port)
start=$(date +%s)
code0=0
code1=0
RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout 60 "$LOOM" train "$TINY" --run-dir "$WORK/ws0" --set train.global_batch_size=12 \
  --set parallel.timeout_s=$timeout_s > "$WORK/ws0.log" 2>&1 &
rank0=$!
RANK=1 WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout 60 "$LOOM" train "$TINY" --run-dir "$WORK/ws1" --set train.global_batch_size=12 \
  --set parallel.timeout_s=$timeout_s > "$WORK/ws1.log" 2>&1 || code1=$?
wait "$rank0" || code0=$?
seconds=$(($(date +%s) - start))
[ "$code0" = 2 ] && grep -q "WORLD_SIZE = 3 on rank 1, 2 on rank 0" "$WORK/ws0.log" && [ "$code1" != 0 ] &&
  [ "$seconds" -le $((timeout_s + 20)) ] ||
  { cat "$WORK/ws0.log" "$WORK/ws1.log"; fail "WORLD_SIZE 2 and 3: exits $code0 and $code1 after $seconds s"; }
echo "WORLD_SIZE 2 on rank 0, 3 on rank 1: rank 0 named WORLD_SIZE (exit 2), both ended within $seconds s"
