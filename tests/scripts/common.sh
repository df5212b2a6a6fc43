# Shared by the end-to-end test scripts. Expects LOOM (the executable) and LOOM_SOURCE (the repo).
set -euo pipefail
: "${LOOM:?LOOM must point at the loom executable}"
: "${LOOM_SOURCE:?LOOM_SOURCE must point at the repository}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
TINY="$LOOM_SOURCE/tests/configs/tiny.yaml"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/loom-test.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# compare_losses RUN_A RUN_B: per-step losses agree within 1e-5 * max(1, |b|).
compare_losses() {
  python3 "$LOOM_SOURCE/tests/scripts/compare_metrics.py" "$1/metrics.jsonl" "$2/metrics.jsonl" --rtol 1e-5
}
