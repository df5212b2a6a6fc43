# Shared by the end-to-end test scripts. Expects LOOM (the executable) and LOOM_SOURCE (the repo).
set -euo pipefail
: "${LOOM:?LOOM must point at the loom executable}"
: "${LOOM_SOURCE:?LOOM_SOURCE must point at the repository}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
TINY="$LOOM_SOURCE/tests/configs/tiny.yaml"
SCRIPTS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"  # this folder: checks.py, the checks on loom's output
WORK="$(mktemp -d "${TMPDIR:-/tmp}/loom-test.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# compare_losses RUN_A RUN_B: per-step losses agree within 1e-5 * max(1, |b|).
compare_losses() {
  python3 "$SCRIPTS/checks.py" compare-metrics "$1/metrics.jsonl" "$2/metrics.jsonl" --rtol 1e-5
}

# run_loom NP NAME [args...]: loom train on the tiny config into $WORK/NAME, its output in
# $WORK/NAME.log, one process without a launcher or NP under mpirun; exits like loom.
run_loom() {
  local np="$1" name="$2"
  shift 2
  if [ "$np" = 1 ]; then
    "$LOOM" train "$TINY" --run-dir "$WORK/$name" "$@" > "$WORK/$name.log" 2>&1
  else
    mpirun --oversubscribe -np "$np" "$LOOM" train "$TINY" --run-dir "$WORK/$name" "$@" > "$WORK/$name.log" 2>&1
  fi
}

# compare_resumed RESUMED STRAIGHT FIRST LAST WHAT: the resumed run has exactly steps FIRST..LAST,
# whose losses equal the uninterrupted run's within 1e-5 relative.
compare_resumed() {
  python3 "$SCRIPTS/checks.py" steps-agree "$1" "$2" --rtol 1e-5 --first "$3" --last "$4" --label "$5"
}

# expect_exit CODE PATTERN COMMAND...: COMMAND exits CODE and prints PATTERN (a grep pattern).
expect_exit() {
  local want="$1" pattern="$2" code=0
  shift 2
  "$@" > "$WORK/out" 2>&1 || code=$?
  [ "$code" = "$want" ] || { cat "$WORK/out"; fail "'$*' exited $code, expected $want"; }
  grep -q -- "$pattern" "$WORK/out" || { cat "$WORK/out"; fail "'$*' did not print '$pattern'"; }
}

# wait_for_step2 LOG PID: waits until the job PID has logged step 2 in LOG (training runs, so a
# fault lands in a step's collectives); fails, showing LOG, if the job ends first or after 60 s.
wait_for_step2() {
  for _ in $(seq 600); do
    grep -q "step  *2/" "$1" && return 0
    kill -0 "$2" 2> /dev/null || { cat "$1"; fail "the job ended before step 2"; }
    sleep 0.1
  done
  kill "$2"
  cat "$1"
  fail "no step 2 after 60 s"
}
