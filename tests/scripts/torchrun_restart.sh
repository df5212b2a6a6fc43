#!/usr/bin/env bash
# torchrun --max_restarts: rank 1 killed at step 13, after the checkpoint of step 10, makes the agent
# restart every rank with the same command line. The second attempt (TORCHELASTIC_RESTART_COUNT 1)
# meets under its own store prefix, does not inject the fault again, resumes from step 10 with
# --resume auto, and its steps 11-20 equal an uninterrupted run's bit for bit. Without a restart
# left (--max_restarts 0) the same job fails, so the kill above really happened.
# The same with two agents of two ranks each, as on two nodes, meeting through a c10d rendezvous
# (no agent store: rank 0 serves a new store each attempt), rank 3 killed.
# The agent itself killed (SIGKILL, as the out-of-memory killer does): its ranks, which trained on
# without a launcher before, save and stop (a SIGTERM on their parent's death, launch/stop_signals.h).
# An elastic job (--nnodes 1:2) whose other agent is killed alone goes on at world 2 from the step
# the dead agent's ranks saved, every step once, with one process's losses.
source "$(dirname "$0")/common.sh"
RUN=(--set parallel.tp=2 --set parallel.timeout_s=60 --set checkpoint.interval=5 --resume auto)
FAULT=(--inject-fault 1:13:kill)

torchrun_loom() {  # torchrun_loom NAME MAX_RESTARTS [loom train arguments...]: exits like torchrun
  local name="$1" restarts="$2"
  shift 2
  torchrun --log_dir "$WORK/$name.torchrun" --nproc_per_node 4 \
    --max_restarts "$restarts" --master_port "$(free_port)" --no_python "$LOOM" train "$TINY" \
    --run-dir "$WORK/$name" --set checkpoint.dir="$WORK/${name}_ck" "${RUN[@]}" "$@" > "$WORK/$name.log" 2>&1
}

torchrun_loom straight 0 || { cat "$WORK/straight.log"; fail "the uninterrupted run failed"; }
torchrun_loom restarted 1 "${FAULT[@]}" || { cat "$WORK/restarted.log"; fail "torchrun --max_restarts 1 failed"; }
for pattern in "injected fault: kill at step 13" "resumed from .*step_00000010 at step 10" "done: 10 steps"; do
  grep -q -- "$pattern" "$WORK/restarted.log" || { cat "$WORK/restarted.log"; fail "no line matching '$pattern'"; }
done
[ "$(grep -c "injected fault" "$WORK/restarted.log")" = 1 ] || fail "the fault fired again on the second attempt"
[ -d "$WORK/restarted.torchrun" ] && ls -d "$WORK"/restarted.torchrun/*/attempt_1 > /dev/null ||
  fail "torchrun made no second attempt"
# The last ten records are the second attempt's, whether it appended to metrics.jsonl or started it anew.
mkdir "$WORK/second_attempt"
tail -n 10 "$WORK/restarted/metrics.jsonl" > "$WORK/second_attempt/metrics.jsonl"
python3 "$SCRIPTS/checks.py" steps-agree "$WORK/second_attempt" "$WORK/straight" --rtol 0 --first 11 --last 20 \
  --same-samples --label "killed at step 13, restarted by torchrun" || fail "the restarted run's losses differ"

# Two agents, one per pretend node, each started as on its own node.
endpoint="127.0.0.1:$(free_port)"
pids=()
for node in 0 1; do
  # timeout: only a guard, so that a hung rendezvous fails here rather than at ctest's limit.
  timeout 300 torchrun --log_dir "$WORK/nodes.torchrun$node" \
    --nnodes 2 --nproc_per_node 2 --rdzv_backend c10d --rdzv_endpoint "$endpoint" --rdzv_id restart_test --max_restarts 1 --no_python "$LOOM" train \
    "$TINY" --run-dir "$WORK/nodes" --set checkpoint.dir="$WORK/nodes_ck" "${RUN[@]}" --inject-fault 3:13:kill \
    > "$WORK/node$node.log" 2>&1 &
  pids+=($!)
done
for node in 0 1; do
  code=0
  wait "${pids[$node]}" || code=$?
  [ "$code" = 0 ] || { cat "$WORK/node$node.log"; fail "the agent of node $node exited $code"; }
done
# Which agent holds rank 3 (and which rank 0) depends on the order they joined the rendezvous.
cat "$WORK/node0.log" "$WORK/node1.log" > "$WORK/nodes.log"
grep -q "injected fault: kill at step 13" "$WORK/nodes.log" && grep -q "resumed from .*step_00000010 at step 10" \
  "$WORK/nodes.log" || { cat "$WORK"/node?.log; fail "two agents: no kill at step 13 or no resume from step 10"; }
mkdir "$WORK/nodes_second_attempt"
tail -n 10 "$WORK/nodes/metrics.jsonl" > "$WORK/nodes_second_attempt/metrics.jsonl"
python3 "$SCRIPTS/checks.py" steps-agree "$WORK/nodes_second_attempt" "$WORK/straight" --rtol 0 --first 11 --last 20 \
  --same-samples --label "two agents (c10d rendezvous), rank 3 killed at step 13" || fail "two agents: losses differ"

code=0
torchrun_loom no_restart 0 "${FAULT[@]}" || code=$?
[ "$code" != 0 ] && grep -q "injected fault: kill at step 13" "$WORK/no_restart.log" ||
  { cat "$WORK/no_restart.log"; fail "with --max_restarts 0 the killed job should fail (exit $code)"; }

# The agent killed once its ranks have trained 3 steps (or after 120 s: then no checkpoint fails it).
torchrun --nproc_per_node 2 --master_port "$(free_port)" --no_python "$LOOM" train "$TINY" \
  --run-dir "$WORK/orphaned" --set checkpoint.dir="$WORK/orphaned_ck" --set train.steps=100000 \
  > "$WORK/orphaned.log" 2>&1 &
agent=$!
for _ in $(seq 600); do
  [ "$(cat "$WORK/orphaned/metrics.jsonl" 2> /dev/null | wc -l)" -ge 3 ] && break
  sleep 0.2
done
kill -KILL "$agent"
for _ in $(seq 300); do  # its ranks: up to 60 s to finish their step, save and stop
  pgrep -f "$WORK/orphaned_ck" > /dev/null || break
  sleep 0.2
done
if pgrep -f "$WORK/orphaned_ck" > /dev/null; then
  pkill -KILL -f "$WORK/orphaned_ck"
  fail "the ranks of a killed torchrun agent still run 60 s after it"
fi
grep -q "stopped by a signal after step .* (a torchrun agent of this job has died, and the ranks it started with it)" "$WORK/orphaned.log" &&
  grep -q "^step_" "$WORK/orphaned_ck/latest" || { cat "$WORK/orphaned.log"; fail "a killed agent's ranks saved nothing"; }

# An elastic job (--nnodes 1:2) loses one of its two agents, killed alone (not its ranks, which save
# and stop on its death): the other agent's ranks stop at the same step and exit 75, so that their
# agent restarts them with the ranks that are left. They used to exit 0: their agent took the job for
# finished, and it ended at that step. Now the job resumes at world 2 and trains every step once,
# with one process's losses (at tp 2: dp 2, then 1). The agent killed is not the one serving the
# rendezvous store (the other would lose its rendezvous with it).
"$LOOM" train "$TINY" --run-dir "$WORK/elastic_ref" --set train.steps=200 > "$WORK/elastic_ref.log" 2>&1 ||
  { cat "$WORK/elastic_ref.log"; fail "the one-process run of 200 steps"; }
port="$(free_port)"
pids=()
for node in 0 1; do
  timeout 300 torchrun --log_dir "$WORK/elastic.torchrun$node" --nnodes 1:2 --nproc_per_node 2 --rdzv_backend c10d \
    --rdzv_endpoint "127.0.0.1:$port" --rdzv_id elastic_test --rdzv_conf last_call_timeout=5 --max_restarts 1 \
    --no_python "$LOOM" train "$TINY" --run-dir "$WORK/elastic" --set checkpoint.dir="$WORK/elastic_ck" \
    --set checkpoint.interval=10 --set train.steps=200 --set parallel.tp=2 --set parallel.timeout_s=60 --resume auto \
    > "$WORK/elastic$node.log" 2>&1 &
  pids+=($!)
  [ "$node" = 0 ] && sleep 2  # the first serves the rendezvous store
done
for _ in $(seq 600); do
  [ "$(cat "$WORK/elastic/metrics.jsonl" 2> /dev/null | wc -l)" -ge 30 ] && break
  sleep 0.2
done
host=$(ss -ltnp | grep ":$port " | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2)
victim=
for pid in $(pgrep -f -- "--rdzv_id elastic_test"); do
  [ "$(ps -o comm= -p "$pid")" = pt_elastic ] && [ "$pid" != "$host" ] && victim=$pid
done
[ -n "$host" ] && [ -n "$victim" ] || { cat "$WORK"/elastic?.log; fail "elastic: no agent to kill (host '$host')"; }
kill -KILL "$victim"
survivor=0
[ "$(pgrep -P "${pids[1]}")" = "$host" ] && survivor=1
code=0
wait "${pids[$survivor]}" || code=$?
wait "${pids[$((1 - survivor))]}" || true
[ "$code" = 0 ] || { cat "$WORK"/elastic?.log; fail "elastic: the surviving agent exited $code"; }
grep -q "this rank exits 75 so that its own agent restarts it" "$WORK/elastic$survivor.log" &&
  grep -q "resumed from .*step_000000[0-9]* at step" "$WORK/elastic$survivor.log" &&
  grep -q "done: .* steps" "$WORK/elastic$survivor.log" || { cat "$WORK"/elastic?.log; fail "elastic: no restart and resume"; }
python3 "$SCRIPTS/checks.py" steps-agree "$WORK/elastic" "$WORK/elastic_ref" --rtol 1e-5 --first 1 --last 200 \
  --label "an elastic job that lost an agent, resumed at world 2" || fail "elastic: losses or steps differ"
echo "torchrun restart: ok"
