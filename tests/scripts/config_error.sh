#!/usr/bin/env bash
# A config that no rank can run (world 3 with tp 2; more expert-parallel ranks than experts)
# fails every rank at once with exit 2 and the key named: it is checked before any rank
# connects to another, so none waits on the store for ranks that already left.
# parallel.timeout_s is 60 and each launch gets 30 s, so a run that waits on the store fails.
# Usage: config_error.sh mpirun|plain
source "$(dirname "$0")/common.sh"
mode="$1"
guard=30

# expect_config_error CODE LOG KEY: a launch that exited CODE, its output in LOG, which must name KEY.
expect_config_error() {
  local code="$1" log="$2" key="$3"
  [ "$code" != 124 ] || { cat "$log"; fail "still running after $guard s: a rank waited instead of failing at once"; }
  [ "$code" = 2 ] || { cat "$log"; fail "exited $code, expected 2"; }
  grep -q "loom: error: config key '$key'" "$log" || { cat "$log"; fail "the error does not name '$key'"; }
}

# mpirun_config_error NP KEY ARGS...: one launch under mpirun.
mpirun_config_error() {
  local np="$1" key="$2" code=0
  shift 2
  timeout "$guard" mpirun --oversubscribe -np "$np" "$LOOM" train "$TINY" --run-dir "$WORK/run" \
    --set parallel.timeout_s=60 "$@" > "$WORK/mpirun.log" 2>&1 || code=$?
  expect_config_error "$code" "$WORK/mpirun.log" "$key"
}

# plain_config_error RANKS...: those ranks of a world of 3, started by hand, each must fail on its own.
plain_config_error() {
  local port pids=() ranks=("$@") code
  port="$(free_port)"
  for rank in "$@"; do
    RANK=$rank WORLD_SIZE=3 LOCAL_RANK=$rank LOCAL_WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      timeout "$guard" "$LOOM" train "$TINY" --run-dir "$WORK/run" --set parallel.timeout_s=60 --set parallel.tp=2 \
      > "$WORK/rank$rank.log" 2>&1 &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    code=0
    wait "${pids[$i]}" || code=$?
    expect_config_error "$code" "$WORK/rank${ranks[$i]}.log" parallel.tp
  done
}

case "$mode" in
  mpirun)
    for try in $(seq 10); do mpirun_config_error 3 parallel.tp --set parallel.tp=2; done
    for try in 1 2 3; do mpirun_config_error 4 model.moe.num_experts --set model.moe.num_experts=2 --set parallel.ep=4; done
    echo "config error under mpirun: exit 2 with the key named, 10 of 10 (tp) and 3 of 3 (ep)"
    ;;
  plain)
    plain_config_error 0 1 2
    # Without rank 0 there is no store at all: ranks 1 and 2 must not try to reach it.
    plain_config_error 1 2
    echo "config error under a plain launch: every rank exited 2 at once, with or without rank 0's store"
    # Ranks started with different configs: all refuse at rendezvous, the differing rank naming the keys.
    port="$(free_port)"
    pids=()
    for rank in 0 1; do
      lr=0.001
      [ "$rank" = 1 ] && lr=0.002
      RANK=$rank WORLD_SIZE=2 LOCAL_RANK=$rank LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        timeout "$guard" "$LOOM" train "$TINY" --run-dir "$WORK/differ" --set parallel.timeout_s=60 --set train.lr=$lr \
        --set model.hidden_size=$((64 + 32 * rank)) > "$WORK/differ$rank.log" 2>&1 &
      pids+=($!)
    done
    for rank in 0 1; do
      code=0
      wait "${pids[$rank]}" || code=$?
      [ "$code" = 2 ] && grep -q "the ranks were started with different configs: rank 1 differs from rank 0" \
        "$WORK/differ$rank.log" || { cat "$WORK/differ$rank.log"; fail "rank $rank: exit $code, expected 2 naming rank 1"; }
    done
    grep -q "(model.hidden_size = 96 here, 64 on rank 0, train.lr = 0.002 here, 0.001 on rank 0)" "$WORK/differ1.log" ||
      { cat "$WORK/differ1.log"; fail "rank 1 should name the keys that differ"; }
    echo "different configs on two ranks: both exited 2, rank 1 naming model.hidden_size and train.lr"
    # --resume on one rank only: refused alike at rendezvous (it used to wait in the checkpoint's
    # broadcast until parallel.timeout_s).
    port="$(free_port)"
    pids=()
    for rank in 0 1; do
      resume=()
      [ "$rank" = 1 ] && resume=(--resume auto)
      RANK=$rank WORLD_SIZE=2 LOCAL_RANK=$rank LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port         timeout "$guard" "$LOOM" train "$TINY" --run-dir "$WORK/resume_differs" --set parallel.timeout_s=60         --set checkpoint.dir="$WORK/resume_differs_ck" "${resume[@]}" > "$WORK/resume$rank.log" 2>&1 &
      pids+=($!)
    done
    for rank in 0 1; do
      code=0
      wait "${pids[$rank]}" || code=$?
      [ "$code" = 2 ] && grep -q "the ranks were started with different configs: rank 1 differs from rank 0"         "$WORK/resume$rank.log" || { cat "$WORK/resume$rank.log"; fail "--resume on rank 1 only: rank $rank exit $code"; }
    done
    grep -q "(--resume = given here, not given on rank 0)" "$WORK/resume1.log" ||
      { cat "$WORK/resume1.log"; fail "rank 1 should name --resume"; }
    echo "--resume on one rank only: both exited 2, rank 1 naming --resume"
    # One relative data.path, two working directories holding different datasets: refused at
    # rendezvous (exit 2) naming the files' sizes and checksums, where both trained silently.
    for d in a b; do
      mkdir -p "$WORK/cwd_$d"
      bytes=4000
      [ "$d" = b ] && bytes=6000
      head -c "$bytes" "$LOOM_SOURCE/README.md" > "$WORK/cwd_$d/t.txt"
      (cd "$WORK/cwd_$d" && "$LOOM" prepare --input t.txt --output base > /dev/null) || fail "prepare in cwd_$d"
    done
    port="$(free_port)"
    pids=()
    for rank in 0 1; do
      (cd "$WORK/cwd_$([ "$rank" = 0 ] && echo a || echo b)" && RANK=$rank WORLD_SIZE=2 LOCAL_RANK=$rank \
        LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout "$guard" "$LOOM" train "$TINY" \
        --run-dir "$WORK/data_differs" --set data.path=base --set model.vocab_size=257 > "$WORK/data$rank.log" 2>&1) &
      pids+=($!)
    done
    for rank in 0 1; do
      code=0
      wait "${pids[$rank]}" || code=$?
      [ "$code" = 2 ] || { cat "$WORK/data$rank.log"; fail "different data on rank 1: rank $rank exit $code"; }
    done
    grep -q "data.path files base = .bin [0-9]* bytes" "$WORK/data1.log" || { cat "$WORK/data1.log"; fail "no data files named"; }
    echo "one data.path, different files: both exited 2, rank 1 naming the files"
    # The launch environment: a port out of range and a world size past an int are refused (exit 2)
    # before anything waits; a rank that never comes is named after parallel.timeout_s (exit 1).
    export RANK=0 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1
    expect_exit 2 "MASTER_PORT='99999' is not a TCP port" env WORLD_SIZE=2 MASTER_PORT=99999 "$LOOM" train "$TINY" \
      --run-dir "$WORK/env"
    expect_exit 2 "WORLD_SIZE='99999999999' is not a non-negative integer" env WORLD_SIZE=99999999999 \
      MASTER_PORT="$(free_port)" "$LOOM" train "$TINY" --run-dir "$WORK/env"
    expect_exit 1 "rank 1 of 2 did not join the job within parallel.timeout_s" timeout 60 env WORLD_SIZE=2 \
      MASTER_PORT="$(free_port)" "$LOOM" train "$TINY" --run-dir "$WORK/env" --set parallel.timeout_s=2
    # Every rank that never came, not the first alone: the operator looks for the nodes they were on.
    expect_exit 1 "ranks 1, 2 and 3 of 4 did not join the job within parallel.timeout_s" timeout 60 env WORLD_SIZE=4 \
      MASTER_PORT="$(free_port)" "$LOOM" train "$TINY" --run-dir "$WORK/env" --set parallel.timeout_s=2
    unset RANK LOCAL_RANK MASTER_ADDR
    echo "launch environment: a bad port or world size refused, the ranks that never came named"
    # A stop signal that comes while a rank starts (srun --kill-on-bad-exit ending the job after
    # another rank's config error) is held until the rank has judged its input: a config error
    # still exits 2, a good config dies by the signal before it connects or trains. The signal is
    # sent blocked before exec, so that it is pending the moment loom begins.
    pending_term() {
      python3 -c 'import os, signal, sys
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])
os.kill(os.getpid(), signal.SIGTERM)
os.execv(sys.argv[1], sys.argv[1:])' "$@"
    }
    expect_exit 2 "loom: error: --set model.hiden_size=3: unknown key" pending_term "$LOOM" train "$TINY" \
      --run-dir "$WORK/held" --set model.hiden_size=3
    expect_exit 143 "" pending_term "$LOOM" train "$TINY" --run-dir "$WORK/held" --set train.steps=1 --set train.warmup_steps=1
    ! grep -q "step 1" "$WORK/out" || { cat "$WORK/out"; fail "a run with a held SIGTERM trained"; }
    expect_exit 143 "" pending_term "$LOOM" topology "$TINY" --world 4
    echo "a SIGTERM held through start-up: a config error exits 2, a good config dies by the signal (143)"
    ;;
  *) fail "usage: config_error.sh mpirun|plain" ;;
esac
