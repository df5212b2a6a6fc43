#!/usr/bin/env bash
# data.eod_mask_loss (Megatron-LM's --eod-mask-loss) finds its end-of-document id in the datasets'
# sidecars (loom prepare --append-eod): a run that names it (data.eod_id) trains to the same losses
# bit for bit, one without the mask to other ones. What cannot be masked is refused before step 1
# (exit 2, naming the key and the dataset): the synthetic corpus, a dataset prepared without
# --append-eod or made by another tool (no sidecar), an id outside the vocabulary, multi-token
# prediction beside it. data.eod_id without the mask is named as doing nothing. (The numbers
# themselves: pytorch_reference.sh against PyTorch's ignore_index, random_layouts.sh over layouts.)
source "$(dirname "$0")/common.sh"

# Each line of the README a document (--split-paragraphs), about 60 bytes each: an EOD in every 60 or so.
awk 'NF {print; print ""}' "$LOOM_SOURCE/README.md" > "$WORK/text.txt"
"$LOOM" prepare --input "$WORK/text.txt" --output "$WORK/eod" --tokenizer byte --split-paragraphs --append-eod \
  > /dev/null || fail "prepare --append-eod"
"$LOOM" prepare --input "$WORK/text.txt" --output "$WORK/plain" --tokenizer byte --split-paragraphs > /dev/null ||
  fail "prepare"
# refused PATTERN SETS...: loom train exits 2 and prints PATTERN.
refused() {
  REFUSED=$((${REFUSED:-0} + 1))
  expect_exit 2 "$1" "$LOOM" train "$TINY" --run-dir "$WORK/refused$REFUSED" "${@:2}"
}
SETS=(--set model.vocab_size=257 --set train.steps=10 --set log.interval=1)

run_loom 1 from_sidecar "${SETS[@]}" --set data.path="$WORK/eod" --set data.eod_mask_loss=true ||
  { cat "$WORK/from_sidecar.log"; fail "eod_mask_loss from the sidecar"; }
grep -q "no loss on the targets after token 256" "$WORK/from_sidecar.log" ||
  { cat "$WORK/from_sidecar.log"; fail "the log does not name the byte tokenizer's EOS (256)"; }
run_loom 1 named "${SETS[@]}" --set data.path="$WORK/eod" --set data.eod_mask_loss=true --set data.eod_id=256 ||
  { cat "$WORK/named.log"; fail "eod_mask_loss with data.eod_id"; }
run_loom 1 unmasked "${SETS[@]}" --set data.path="$WORK/eod" || { cat "$WORK/unmasked.log"; fail "unmasked"; }
python3 - "$WORK" << 'PY'
import json, sys
def losses(name):
    return [json.loads(l)["loss"] for l in open(f"{sys.argv[1]}/{name}/metrics.jsonl") if '"loss"' in l]
a, b, c = losses("from_sidecar"), losses("named"), losses("unmasked")
assert len(a) == len(b) == len(c) == 10, (len(a), len(b), len(c))
assert a == b, f"the sidecar's id and data.eod_id=256 trained differently: {a} {b}"
worst = max(abs(x - y) for x, y in zip(a, c))
# (an inert mask trains bit for bit as the unmasked run: any difference past rounding shows it acted,
# whatever the README's text, this test's corpus, makes of its size)
assert worst > 1e-5, f"the masked run trained as the unmasked one (largest difference {worst})"
print(f"eod mask from the sidecar: equal to data.eod_id=256 over 10 steps, {worst:.3f} from the unmasked run")
PY

# A layout does not change the masked numbers: dp 2 x pp 2 (zb-h1, one sample per micro-batch, whose
# tokens and targets share one window) against one process, training and validation losses alike.
SPLIT=(--set data.path="$WORK/eod" --set data.eod_mask_loss=true --set data.split=90,10,0 --set eval.interval=5
  --set eval.steps=1)
run_loom 1 split_one "${SETS[@]}" "${SPLIT[@]}" || { cat "$WORK/split_one.log"; fail "masked with validation"; }
run_loom 4 split_dp2_pp2 "${SETS[@]}" "${SPLIT[@]}" --set parallel.pp=2 --set parallel.schedule=zb-h1 \
  --set train.micro_batch_size=1 || { cat "$WORK/split_dp2_pp2.log"; fail "masked at dp 2 x pp 2"; }
echo -n "masked, dp 2 x pp 2 against one process: "
compare_losses "$WORK/split_dp2_pp2" "$WORK/split_one" || fail "the masked run at dp 2 x pp 2 differs"
python3 "$SCRIPTS/checks.py" validation-agree "$WORK/split_dp2_pp2" "$WORK/split_one" --rtol 1e-5 --steps 5,10 \
  --label "masked dp 2 x pp 2" || fail "the masked validation at dp 2 x pp 2 differs"

refused "data.eod_mask_loss: the built-in synthetic corpus" --set data.eod_mask_loss=true
refused "prepared without --append-eod" "${SETS[@]}" --set data.path="$WORK/plain" \
  --set data.eod_mask_loss=true
grep -q "$WORK/plain" "$WORK/out" || { cat "$WORK/out"; fail "the refusal does not name the dataset"; }
# The validation data counts too.
refused "data.valid_path '$WORK/plain'" "${SETS[@]}" --set data.path="$WORK/eod" \
  --set data.valid_path="$WORK/plain" --set data.eod_mask_loss=true
cp "$WORK/eod.bin" "$WORK/other.bin" && cp "$WORK/eod.idx" "$WORK/other.idx"  # as Megatron-LM's tools leave it
refused "has no sidecar" "${SETS[@]}" --set data.path="$WORK/other" \
  --set data.eod_mask_loss=true
grep -q "set data.eod_id" "$WORK/out" || { cat "$WORK/out"; fail "the refusal does not say data.eod_id"; }
run_loom 1 no_sidecar_named "${SETS[@]}" --set data.path="$WORK/other" --set data.eod_mask_loss=true \
  --set data.eod_id=256 || { cat "$WORK/no_sidecar_named.log"; fail "data.eod_id over a dataset without sidecar"; }
refused "data.eod_id.*below model.vocab_size" "${SETS[@]}" --set data.path="$WORK/eod" --set data.eod_mask_loss=true \
  --set data.eod_id=257
refused "data.eod_mask_loss.*not built beside multi-token prediction" "${SETS[@]}" --set data.path="$WORK/eod" \
  --set data.eod_mask_loss=true --set model.mtp.depth=1
sed 's/"eos_id": *256/"eos_id": 300/' "$WORK/eod.json" > "$WORK/far.json"
cp "$WORK/eod.bin" "$WORK/far.bin" && cp "$WORK/eod.idx" "$WORK/far.idx"
refused "far' ends its documents with id 300.*outside model.vocab_size" "${SETS[@]}" --set data.path="$WORK/far" \
  --set data.eod_mask_loss=true
# An id that is nearly all of the data leaves no target: the run says that its loss 0 counts nothing.
python3 -c "print('a' * 5000)" > "$WORK/aaa.txt"
"$LOOM" prepare --input "$WORK/aaa.txt" --output "$WORK/aaa" --tokenizer byte --append-eod > /dev/null || fail "prepare aaa"
run_loom 1 nothing_left "${SETS[@]}" --set train.steps=2 --set train.warmup_steps=0 --set data.path="$WORK/aaa" \
  --set data.valid_path="$WORK/aaa" --set eval.steps=1 --set data.eod_mask_loss=true --set data.eod_id=97 ||
  { cat "$WORK/nothing_left.log"; fail "a run with no target left"; }
for what in "every target of the global batch from sample 0 follows token 97" "every validation target follows"; do
  grep -q "$what" "$WORK/nothing_left.log" || { cat "$WORK/nothing_left.log"; fail "no warning: $what"; }
done
# A resume records the id the mask used: naming the sidecars' own id is no change, turning the mask off is.
CK=(--set data.path="$WORK/eod" --set checkpoint.dir="$WORK/ck" --set checkpoint.interval=5)
run_loom 1 saved "${SETS[@]}" "${CK[@]}" --set data.eod_mask_loss=true --set train.exit_after=5 ||
  { cat "$WORK/saved.log"; fail "masked run to step 5"; }
run_loom 1 same_id "${SETS[@]}" "${CK[@]}" --set data.eod_mask_loss=true --set data.eod_id=256 \
  --set train.exit_after=6 --resume auto || { cat "$WORK/same_id.log"; fail "resume naming the id"; }
grep -q "resumed from" "$WORK/same_id.log" && ! grep -q "settings changed" "$WORK/same_id.log" ||
  { cat "$WORK/same_id.log"; fail "naming the sidecars' own id was said to be a change"; }
run_loom 1 unmasked_resume "${SETS[@]}" "${CK[@]}" --resume auto || { cat "$WORK/unmasked_resume.log"; fail "resume"; }
grep -q "data.eod_mask_loss true -> false" "$WORK/unmasked_resume.log" ||
  { cat "$WORK/unmasked_resume.log"; fail "turning the mask off at a resume was not said"; }
run_loom 1 inert "${SETS[@]}" --set train.steps=1 --set train.warmup_steps=0 --set data.path="$WORK/eod" --set data.eod_id=256 ||
  { cat "$WORK/inert.log"; fail "data.eod_id alone"; }
grep -q "data.eod_id.*data.eod_mask_loss is false" "$WORK/inert.log" ||
  { cat "$WORK/inert.log"; fail "data.eod_id without the mask is not named as doing nothing"; }
echo "eod mask loss: ok"
