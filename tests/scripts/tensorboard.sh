#!/usr/bin/env bash
# log.tensorboard: gpt_tiny trained 12 steps with validation every 4, stopped after 6 and resumed
# from step 4 (the stopped attempt's steps 5 and 6 trained again: the new file's SessionLog START
# makes TensorBoard drop the old points, each step read once),
# leaves two event files under RUN_DIR/tensorboard that TensorBoard's own reader (EventAccumulator,
# tests/reference/tensorboard_reader.py) reads with every scalar of metrics.jsonl (loss, avg_loss,
# lr, grad norm, validation loss and perplexity, tokens/s, step time) at the same steps and values
# (a value changed by hand in metrics.jsonl is caught), and that a reader written from the formats'
# descriptions (read_tfevents.py: TFRecord framing, CRC-32C, the protobuf wire format, checked by
# protobuf's runtime) accepts: every CRC, file_version first in each, steps 1..12 in order, the
# memory record equal to metrics.jsonl's as float32. Then scripts/plot_metrics.py draws the
# run (and a record set with validation points) to PNGs, and refuses a directory without metrics.
source "$(dirname "$0")/common.sh"
PY=python3  # the project venv's (first on PATH under ctest)
CONFIG="$LOOM_SOURCE/configs/gpt_tiny.yaml"
RUN="$WORK/gpt_tiny_tb"
ARGS=(--run-dir "$RUN" --set train.steps=12 --set train.warmup_steps=3 --set log.tensorboard=true
  --set log.interval=2 --set checkpoint.dir="$WORK/ck" --set data.split=90,10,0 --set eval.interval=4
  --set eval.steps=1)

"$LOOM" train "$CONFIG" "${ARGS[@]}" --set train.exit_after=6 --set checkpoint.interval=4 > "$WORK/first.log" 2>&1 ||
  { cat "$WORK/first.log"; fail "the first 6 steps"; }
# Step 6's checkpoint gone: the resume trains steps 5 and 6 again, and TensorBoard must show them once.
rm -rf "$WORK/ck/step_00000006"
"$LOOM" train "$CONFIG" "${ARGS[@]}" --resume auto > "$WORK/second.log" 2>&1 ||
  { cat "$WORK/second.log"; fail "the resumed steps 5..12"; }
grep -q "at step 4" "$WORK/second.log" || { cat "$WORK/second.log"; fail "did not resume at step 4"; }

mapfile -t FILES < <(ls "$RUN/tensorboard"/events.out.tfevents.* | sort)
[ "${#FILES[@]}" = 2 ] || { ls -l "$RUN/tensorboard"; fail "expected one event file per run, 2 in all"; }
for f in "${FILES[@]}"; do
  [[ "$(basename "$f")" =~ ^events\.out\.tfevents\.[0-9]{10}\.$(hostname)(\.[0-9]+)?$ ]] ||
    fail "$(basename "$f") is not TensorBoard's events.out.tfevents.SECONDS.HOST"
done
"$PY" "$SCRIPTS/read_tfevents.py" check "$RUN/metrics.jsonl" --steps 12 "${FILES[@]}" || fail "event files"
"$PY" "$LOOM_SOURCE/tests/reference/tensorboard_reader.py" "$RUN" || fail "TensorBoard's reader"
grep -q '"val_ppl"' "$RUN/metrics.jsonl" || fail "no validation record to compare"
# A value changed by hand is caught.
sed 's/"lr":[0-9.e-]*/"lr":0.5/' "$RUN/metrics.jsonl" > "$WORK/changed.jsonl"
if "$PY" "$LOOM_SOURCE/tests/reference/tensorboard_reader.py" "$RUN" "$WORK/changed.jsonl" > "$WORK/changed.log" 2>&1; then
  fail "TensorBoard's reader found no difference after a change by hand"
fi

# plot_metrics.py: the run's curves, a PNG of some substance.
png_ok() {
  [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "$1 is not a PNG"
  [ "$(stat -c %s "$1")" -gt 10000 ] || fail "$1 is only $(stat -c %s "$1") bytes"
}
"$PY" "$LOOM_SOURCE/scripts/plot_metrics.py" "$RUN" > /dev/null || fail "plot_metrics.py on the run"
png_ok "$RUN/metrics.png"
# Validation records (val_loss without loss, as an evaluation step writes them) between training ones.
mkdir "$WORK/with_val"
"$PY" - "$WORK/with_val/metrics.jsonl" << 'PYEOF'
import json, math, sys
with open(sys.argv[1], "w") as out:
    for step in range(1, 101):
        out.write(json.dumps({"step": step, "loss": 5.5 * math.exp(-step / 30) + 1.0, "lr": 1e-3}) + "\n")
        if step % 20 == 0:
            out.write(json.dumps({"step": step, "val_loss": 5.5 * math.exp(-step / 30) + 1.2}) + "\n")
PYEOF
"$PY" "$LOOM_SOURCE/scripts/plot_metrics.py" "$WORK/with_val" --output "$WORK/with_val.png" > /dev/null ||
  fail "plot_metrics.py with validation records"
png_ok "$WORK/with_val.png"
[ ! -e "$WORK/with_val/metrics.png" ] || fail "--output was not followed"
mkdir "$WORK/empty"
set +e
"$PY" "$LOOM_SOURCE/scripts/plot_metrics.py" "$WORK/empty" 2> "$WORK/empty.err"
code=$?
set -e
[ "$code" = 2 ] && grep -q "metrics.jsonl" "$WORK/empty.err" || { cat "$WORK/empty.err"; fail "no metrics.jsonl: exit $code"; }
echo "tensorboard: ok"
