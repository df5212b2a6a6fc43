#!/usr/bin/env bash
# The public C++ API: (1) the example's custom model (not the GPT), trained by
# loom's trainer at tp=2, gives the one-process losses within 1e-5 and learns, and
# gets per-block ZeRO-3 and full recomputation with no code of its own;
# (2) loom installs as a CMake package that a separate project finds with
# find_package(loom) and builds against.
# (3) The program's own `verify` (train_main) passes the example at tp 2 and catches a model that
# forgot copy_to_tp_region (exit 4).
# Usage: custom_model.sh EXAMPLE_BINARY BUILD_DIR FORGOTTEN_REGION_BINARY
source "$(dirname "$0")/common.sh"
example="$1"
build_dir="$2"
forgotten="$3"
sets=(--set model.hidden_size=32 --set model.ffn_hidden_size=64 --set train.steps=20 --set train.lr=0.03 --set train.min_lr=0.003)

"$example" "$TINY" --run-dir "$WORK/tp1" "${sets[@]}" > "$WORK/tp1.log" 2>&1 || { cat "$WORK/tp1.log"; fail "tp=1 run"; }
mpirun --oversubscribe -np 2 "$example" "$TINY" --run-dir "$WORK/tp2" --set parallel.tp=2 "${sets[@]}" \
  > "$WORK/tp2.log" 2>&1 || { cat "$WORK/tp2.log"; fail "tp=2 run"; }
echo -n "custom model tp=2 vs one process: "
compare_losses "$WORK/tp2" "$WORK/tp1" || fail "the custom model's losses differ at tp=2"
# A model built whole (a ModelFactory) refuses to be split into pipeline stages, naming the key.
code=0
mpirun --oversubscribe -np 2 "$example" "$TINY" --run-dir "$WORK/pp2" --set parallel.pp=2 "${sets[@]}" \
  > "$WORK/pp2.log" 2>&1 || code=$?
[ "$code" = 2 ] && grep -q "config key 'parallel.pp'" "$WORK/pp2.log" || { cat "$WORK/pp2.log"; fail "pp=2 of a whole model: exit $code"; }
python3 "$SCRIPTS/checks.py" learns "$WORK/tp1" --by 0.5 || fail "the custom model did not learn"

# ZeRO-3 and full recomputation applied from outside: the example only declares its blocks
# (models/block_stack.h). At dp=4, stage 3 keeps 16N/d bytes of model state per rank (N: the
# rank's parameters, from the stage-0 run) and gives stage 0's losses within the project's 1e-5 (stage 3 sums gradients in another order: its
# last-bit differences reached 2.4e-6 by step 15 on an Intel Xeon, so 1e-6 held on one CPU only); full
# recomputation on top gives the same losses bit for bit.
for run in "zero0 0 none" "zero3 3 none" "zero3_full 3 full"; do
  set -- $run
  mpirun --oversubscribe -np 4 "$example" "$TINY" --run-dir "$WORK/$1" "${sets[@]}" --set parallel.zero_stage="$2" \
    --set train.recompute="$3" > "$WORK/$1.log" 2>&1 || { cat "$WORK/$1.log"; fail "custom model $1"; }
done
python3 "$SCRIPTS/checks.py" zero-memory "$WORK/zero3" --stage 3 --baseline "$WORK/zero0" --dp 4 ||
  fail "custom model: ZeRO-3 memory report differs from 16N/d"
echo -n "custom model zero_stage 3 vs 0: "
python3 "$SCRIPTS/checks.py" compare-metrics "$WORK/zero3/metrics.jsonl" "$WORK/zero0/metrics.jsonl" --rtol 1e-5 ||
  fail "custom model: zero_stage 3 changed the losses"
echo -n "custom model zero_stage 3 with full recomputation vs without: "
python3 "$SCRIPTS/checks.py" compare-metrics "$WORK/zero3_full/metrics.jsonl" "$WORK/zero3/metrics.jsonl" --rtol 0 ||
  fail "custom model: full recomputation changed the losses"

# (3) A user's program verifies its own model as loom verify does loom's: the example at tp 2 is
# equal to one process; a model that forgot copy_to_tp_region before its tied output layer
# (tests/programs/forgotten_region_model.cpp: partial gradients below it) is caught at step 1's
# gradients, exit 4, naming a parameter.
mpirun --oversubscribe -np 2 "$example" verify "$TINY" --run-dir "$WORK/verify_example" --set parallel.tp=2 \
  "${sets[@]}" > "$WORK/verify_example.log" 2>&1 || { cat "$WORK/verify_example.log"; fail "the example's verify"; }
grep -q "^verdict: equal within 1.0e-05 relative (fp32)" "$WORK/verify_example.log" ||
  { cat "$WORK/verify_example.log"; fail "the example's verify gave no verdict"; }
code=0
mpirun --oversubscribe -np 2 "$forgotten" verify "$TINY" --run-dir "$WORK/verify_forgotten" --set parallel.tp=2 \
  > "$WORK/verify_forgotten.log" 2>&1 || code=$?
[ "$code" = 4 ] && grep -q "^verdict: differs from step 1 .*: \(down\|up\)\.\(weight\|bias\)" "$WORK/verify_forgotten.log" ||
  { cat "$WORK/verify_forgotten.log"; fail "verify of a model without copy_to_tp_region: exit $code, not 4 naming it"; }
echo "a user's program verifies its own model: the example equal at tp 2, a forgotten copy_to_tp_region caught (exit 4)"

# Install, then build the example as a separate project against the installed package.
cmake --install "$build_dir" --prefix "$WORK/prefix" > "$WORK/install.log" || { cat "$WORK/install.log"; fail "install"; }
[ -f "$WORK/prefix/include/loom/parallel/tensor_parallel.h" ] || fail "headers not installed"
cmake -S "$LOOM_SOURCE/examples/custom_model" -B "$WORK/user" -DCMAKE_PREFIX_PATH="$WORK/prefix" \
  -DCMAKE_BUILD_TYPE=Release > "$WORK/user.log" 2>&1 || { cat "$WORK/user.log"; fail "find_package(loom)"; }
cmake --build "$WORK/user" -j 2 > "$WORK/user_build.log" 2>&1 || { cat "$WORK/user_build.log"; fail "building against the package"; }
"$WORK/user/mlp_language_model" "$TINY" --run-dir "$WORK/user_run" "${sets[@]}" --set train.steps=2 \
  --set train.warmup_steps=1 > "$WORK/user_run.log" 2>&1 || { cat "$WORK/user_run.log"; fail "the separately built program"; }
echo "custom model through the public API: ok"
