#!/usr/bin/env bash
# Data in (issue: real data, blends, validation):
#  1. data.split gives a validation loss at steps 5 and 10 equal at tp2 x pp2 x dp2, at dp2 with ZeRO-3 and in
#     one process (1e-5 relative); val_ppl = exp(val_loss); avg_loss is the mean over the log interval.
#  2. A blend "0.3 A 0.7 B" in shuffled order: 6 steps, resume, 6 more give the losses of 12 straight steps
#     bit for bit (the same samples in the same order); the small dataset wraps and the log says so;
#     data.valid_path may be a blend.
#  3. A dataset holding an id the model cannot embed is refused before step 1 (exit 2), by its sidecar or
#     by a scan, in one process and under mpirun; bad blends, splits and paths name their key (exit 2).
#  4. A validation set smaller than eval.steps global batches is said once.
#  5. A resume whose data would not continue the checkpoint's order (another shuffle seed, the blend's
#     datasets listed the other way round) is refused naming what changed, unless --allow-data-change;
#     --resume auto whose checkpoint.dir does not exist, in a run directory holding that run's
#     metrics, is refused rather than training it again from step 0. A refused resume sets no newer
#     checkpoint aside; the same files at another path (whose name holds a blank) continue the run;
#     files prepared again with the same sizes (upper-cased text) are refused, and so is another
#     train.seed over the built-in corpus (which it draws).
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=1

# 1. Validation equal across layouts.
EVAL=(--set data.split=90,10,0 --set eval.interval=5 --set eval.steps=2 --set train.steps=10 --set log.interval=5)
run_loom 1 one "${EVAL[@]}" || { cat "$WORK/one.log"; fail "one process"; }
grep -q "validation at step 10 | loss" "$WORK/one.log" || fail "no validation line in the log"
run_loom 8 l222 "${EVAL[@]}" --set parallel.tp=2 --set parallel.pp=2 || { cat "$WORK/l222.log"; fail "tp2 pp2 dp2"; }
python3 "$SCRIPTS/checks.py" validation-agree "$WORK/l222" "$WORK/one" --rtol 1e-5 --steps 5,10 --label "tp2 x pp2 x dp2"
run_loom 2 zero3 "${EVAL[@]}" --set parallel.zero_stage=3 || { cat "$WORK/zero3.log"; fail "dp2 zero3"; }
python3 "$SCRIPTS/checks.py" validation-agree "$WORK/zero3" "$WORK/one" --rtol 1e-5 --steps 5,10 --label "dp2 ZeRO-3"

# 2. A blend, resumed. Two small byte datasets of different text; A (30% of the samples) wraps.
python3 - "$WORK" << 'PY'
import sys
work = sys.argv[1]
open(f"{work}/a.txt", "w").write("".join(f"alpha {i} beta {i * i % 97} gamma. " for i in range(20)))
open(f"{work}/b.txt", "w").write("".join(f"The quick brown fox {i} jumps over the lazy dog {i % 13}.\n" for i in range(300)))
PY
"$LOOM" prepare --input "$WORK/a.txt" --output "$WORK/a" > /dev/null
"$LOOM" prepare --input "$WORK/b.txt" --output "$WORK/b" > /dev/null
# The sidecars loom prepare wrote (byte tokenizer, vocabulary 257, largest id 255) let a 256-id model train.
BLEND=(--set model.vocab_size=256 --set "data.path=0.3 $WORK/a 0.7 $WORK/b" --set data.order=shuffled
  --set train.steps=12 --set "data.valid_path=1 $WORK/b 1 $WORK/a" --set eval.interval=6 --set eval.steps=1)
run_loom 2 blend "${BLEND[@]}" --set checkpoint.dir="$WORK/ck_blend" || { cat "$WORK/blend.log"; fail "blend"; }
grep -q "data.path '$WORK/a' wrapped around: epoch 2 of it started during step" "$WORK/blend.log" ||
  { cat "$WORK/blend.log"; fail "no epoch line for the small dataset"; }
grep -q "data.path '$WORK/b' wrapped" "$WORK/blend.log" && fail "the large dataset should not wrap in 12 steps"
[ "$(grep -c '"val_loss"' "$WORK/blend/metrics.jsonl")" = 2 ] || fail "a blended data.valid_path should evaluate at 6 and 12"
run_loom 2 blend_first "${BLEND[@]}" --set checkpoint.dir="$WORK/ck_half" --set train.exit_after=6 ||
  { cat "$WORK/blend_first.log"; fail "blend, first half"; }
run_loom 2 blend_second "${BLEND[@]}" --set checkpoint.dir="$WORK/ck_half" --resume auto ||
  { cat "$WORK/blend_second.log"; fail "blend, resumed"; }
python3 "$SCRIPTS/checks.py" steps-agree "$WORK/blend_second" "$WORK/blend" --rtol 0 --first 7 --last 12 \
  --same-samples --label "blend resumed at step 6"

# 3. Ids beyond the vocabulary, before step 1.
expect_refusal() {  # expect_refusal NAME NP PATTERN [args...]: exit 2, PATTERN in the log, no step trained
  local name="$1" np="$2" pattern="$3" code=0
  shift 3
  run_loom "$np" "$name" "$@" || code=$?
  [ "$code" = 2 ] || { cat "$WORK/$name.log"; fail "$name: exit $code, expected 2"; }
  grep -q -- "$pattern" "$WORK/$name.log" || { cat "$WORK/$name.log"; fail "$name: no '$pattern' in the log"; }
  if grep -q "step  *1/" "$WORK/$name.log"; then fail "$name: trained a step before refusing"; fi
  echo "$name: exit 2, '$pattern'"
}
"$LOOM" prepare --input "$WORK/a.txt" --output "$WORK/eod" --append-eod > /dev/null  # ids 0-256
expect_refusal sidecar_max 1 "holds token id 256 (byte, says $WORK/eod.json), outside model.vocab_size = 256" \
  --set model.vocab_size=256 --set "data.path=$WORK/eod"
# A validation set smaller than an evaluation reads is said once (A holds about 15 samples of 32 tokens).
run_loom 1 small_valid --set model.vocab_size=256 --set "data.path=$WORK/b" --set "data.valid_path=$WORK/a" \
  --set train.steps=2 --set train.warmup_steps=1 --set eval.steps=4 || { cat "$WORK/small_valid.log"; fail "small validation set"; }
[ "$(grep -c "fewer than an evaluation reads (eval.steps = 4 x train.global_batch_size = 8)" "$WORK/small_valid.log")" = 1 ] ||
  { cat "$WORK/small_valid.log"; fail "a validation set smaller than eval.steps batches should be said once"; }
grep -q "fewer than an evaluation reads" "$WORK/blend.log" && fail "a large enough validation set should not be warned of"

rm -f "$WORK/eod.json"
expect_refusal scan 1 "holds token id 256, outside model.vocab_size = 256" --set model.vocab_size=256 --set "data.path=$WORK/eod"
expect_refusal scan_mpirun 2 "holds token id 256, outside model.vocab_size = 256" --set model.vocab_size=256 \
  --set "data.path=0.5 $WORK/a 0.5 $WORK/eod"
printf '{"tokenizer": "hf-bpe", "vocab_size": 50257}\n' > "$WORK/a.json"
expect_refusal sidecar 1 "vocabulary of 50257 (hf-bpe, says $WORK/a.json), more than model.vocab_size = 256" \
  --set model.vocab_size=256 --set "data.path=$WORK/a"
expect_refusal valid_sidecar 2 "data.valid_path '$WORK/a' was tokenized" --set model.vocab_size=256 \
  --set "data.path=$WORK/b" --set "data.valid_path=$WORK/a"
rm -f "$WORK/a.json"
expect_refusal odd_blend 1 "config key 'data.path': a blend is weight and prefix pairs" --set "data.path=0.3 $WORK/a 0.7"
expect_refusal missing 2 "config key 'data.valid_path'" --set "data.valid_path=$WORK/nothing"
expect_refusal bad_split 1 "config key 'data.split'" --set data.split=90,x
expect_refusal blank_path 1 "config key 'data.path' holds only blanks" --set "data.path=   "
expect_refusal split_and_valid 1 "data.split" --set data.split=90,10 --set "data.valid_path=$WORK/b"
# A validation weight too small for a token (it rounds the training part to all): refused, not
# announced and skipped; a validation weight of 0 validates nothing and says nothing of it.
# (The refusal says why a part can be empty: the cut falls at document starts.)
expect_refusal tiny_valid 1 "leaves data.path '$WORK/b' no validation document: the parts are cut at document starts" \
  --set model.vocab_size=256 \
  --set "data.path=$WORK/b" --set data.split=1e30,1,1
run_loom 1 no_valid --set model.vocab_size=256 --set "data.path=$WORK/b" --set data.split=100,0,0 --set train.steps=2 \
  --set train.warmup_steps=1 || { cat "$WORK/no_valid.log"; fail "data.split 100,0,0"; }
grep -q "validation" "$WORK/no_valid.log" && { cat "$WORK/no_valid.log"; fail "data.split 100,0,0 announced a validation"; }

# 5. Resumed over other data (the checkpoints of section 2's blend).
expect_refusal data_seed 1 "the data would not continue the checkpoint's order (train.seed (the shuffle's) was" \
  "${BLEND[@]}" --set checkpoint.dir="$WORK/ck_half" --resume auto --set train.seed=7
expect_refusal data_swapped 1 "(data.path was '0.3 $WORK/a 0.7 $WORK/b' and is '0.7 $WORK/b 0.3 $WORK/a')" \
  "${BLEND[@]}" --set "data.path=0.7 $WORK/b 0.3 $WORK/a" --set checkpoint.dir="$WORK/ck_half" --resume auto
run_loom 1 data_allowed "${BLEND[@]}" --set checkpoint.dir="$WORK/ck_half" --resume auto --set train.seed=7 \
  --allow-data-change || { cat "$WORK/data_allowed.log"; fail "--allow-data-change"; }
grep -q -- "--allow-data-change: the data changed (train.seed" "$WORK/data_allowed.log" ||
  { cat "$WORK/data_allowed.log"; fail "--allow-data-change should say what changed"; }
expect_refusal blend_first 1 "checkpoint.dir '$WORK/nowhere' ($WORK/nowhere) does not exist, but run directory" \
  "${BLEND[@]}" --set checkpoint.dir="$WORK/nowhere" --resume auto
[ ! -e "$WORK/nowhere" ] || fail "a refused --resume auto created its checkpoint.dir"
# A refused resume of an older checkpoint sets none of the newer ones aside; the manifest itself
# given for its folder is named so.
expect_refusal older_refused 1 "the data would not continue the checkpoint's order" "${BLEND[@]}" \
  --set checkpoint.dir="$WORK/ck_half" --resume "$WORK/ck_half/step_00000006" --set train.seed=7
[ -d "$WORK/ck_half/step_00000012" ] || { ls "$WORK/ck_half"; fail "a refused resume set step 12 aside"; }
expect_refusal manifest_given 1 "give the step folder that holds it, '$WORK/ck_half/step_00000006'" "${BLEND[@]}" \
  --set checkpoint.dir="$WORK/ck_half" --resume "$WORK/ck_half/step_00000006/manifest.json"
# The same files at another path (a node's local disk, another mount), in a folder whose name holds
# a blank, continue the run.
mkdir -p "$WORK/local copy"
cp "$WORK"/a.* "$WORK"/b.* "$WORK/local copy/"
run_loom 1 moved "${BLEND[@]}" --set "data.path=$WORK/local copy/b" --set "data.valid_path=" \
  --set checkpoint.dir="$WORK/ck_one" --set train.exit_after=1 --set train.steps=2 --set train.warmup_steps=1 ||
  { cat "$WORK/moved.log"; fail "a path with a blank"; }
cp -r "$WORK/local copy" "$WORK/elsewhere"
run_loom 1 moved_resumed "${BLEND[@]}" --set "data.path=$WORK/elsewhere/b" --set "data.valid_path=" \
  --set checkpoint.dir="$WORK/ck_one" --resume auto --set train.steps=2 --set train.warmup_steps=1 ||
  { cat "$WORK/moved_resumed.log"; fail "the same files at another path should continue the run"; }
grep -q "resumed from .*step_00000001 at step 1" "$WORK/moved_resumed.log" ||
  { cat "$WORK/moved_resumed.log"; fail "the run at another path did not resume step 1"; }
# Prepared again with the same sizes (the text upper-cased: the same documents' lengths, other
# tokens): its sizes and index agree with the checkpoint's record, its contents do not. Refused.
tr 'a-z' 'A-Z' < "$WORK/b.txt" > "$WORK/b_upper.txt"
"$LOOM" prepare --input "$WORK/b_upper.txt" --output "$WORK/elsewhere/b" > /dev/null
expect_refusal reprepared 1 "is '$WORK/elsewhere/b' (its files have changed since)" "${BLEND[@]}" \
  --set "data.path=$WORK/elsewhere/b" --set "data.valid_path=" --set checkpoint.dir="$WORK/ck_one" --resume auto \
  --set train.steps=2 --set train.warmup_steps=1
# The built-in corpus is drawn from train.seed: another seed is other data.
run_loom 1 generated --set checkpoint.dir="$WORK/ck_generated" --set train.exit_after=1 --set train.steps=2 \
  --set train.warmup_steps=1 || { cat "$WORK/generated.log"; fail "the built-in corpus"; }
expect_refusal generated_seed 1 "train.seed (the built-in corpus's) was" --set checkpoint.dir="$WORK/ck_generated" \
  --resume auto --set train.seed=7 --set train.steps=2 --set train.warmup_steps=1
echo "data_validation: all checks passed"
