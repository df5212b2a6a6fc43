#!/usr/bin/env bash
# Checkpoints end to end (issue: exact resume, resume at another layout, safety):
#  1. 40 steps straight and 20 + resume + 20 give bit-identical losses at tp=2 pp=2 dp=2, zero_stage 1, dropout on;
#     interval 10 with keep 2 leaves the newest two and `latest` pointing at the last.
#  2. Saved at tp=2 pp=2 dp=2 zero_stage 1, resumed at tp=1 pp=1 dp=1, tp=4 pp=1 dp=2 zero_stage 2 and pp=4: the next 20 losses
#     equal the uninterrupted run's within 1e-5.
#  3. A flipped byte, a truncated file and a missing file are refused naming the file (exit 2), and
#     --resume auto falls back to the previous checkpoint.
#  4. A job killed by SIGKILL while saving leaves the previous checkpoint loadable.
#  5. SIGTERM (SIGUSR1, SIGHUP) finishes the step, saves and exits 0.
#  6. An ignored SIGINT (a script's background job) is kept ignored.
#  7. Exact resume at pp=2 dp=3 with the tied embedding in buckets past Gloo's one-shot size: the two
#     stages' copies of the embedding stay equal (each in a bucket of its own), so the checkpoint's
#     one copy resumes both bit for bit (2e-8 off before: Gloo's ring sums an element in an order set by
#     where it lies in its bucket). Resumed again there at fewer ranks, the others' comm_rankN.json go.
source "$(dirname "$0")/common.sh"
MODEL=(--set model.num_layers=4 --set train.global_batch_size=16 --set train.steps=40)
L222=(--set parallel.tp=2 --set parallel.pp=2 --set parallel.zero_stage=1)

train() { run_loom "$1" "$2" "${MODEL[@]}" "${@:3}"; }  # train NP NAME [args...]: exits like loom
must_train() { train "$@" || { cat "$WORK/$2.log"; fail "run $2 failed"; }; }

# steps_equal A B RTOL FIRST: the losses of run A from step FIRST on equal run B's at the same steps.
steps_equal() {
  python3 "$SCRIPTS/checks.py" steps-agree "$WORK/$1" "$WORK/$2" --rtol "$3" --first "$4" --same-samples
}

# 1. Exact resume, dropout on.
DROP=(--set model.dropout=0.1)
must_train 8 straight "${L222[@]}" "${DROP[@]}" --set checkpoint.dir="$WORK/ck_straight" --set checkpoint.interval=10 --set checkpoint.keep=2
[ "$(ls "$WORK/ck_straight" | grep -c '^step_')" = 2 ] && [ -d "$WORK/ck_straight/step_00000030" ] &&
  [ "$(cat "$WORK/ck_straight/latest")" = step_00000040 ] || { ls -a "$WORK/ck_straight"; fail "keep 2 / latest"; }
must_train 8 first_half "${L222[@]}" "${DROP[@]}" --set checkpoint.dir="$WORK/ck" --set checkpoint.interval=10 --set train.exit_after=20
[ "$(wc -l < "$WORK/first_half/metrics.jsonl")" = 20 ] || fail "exit_after 20 should stop after 20 steps"
must_train 8 second_half "${L222[@]}" "${DROP[@]}" --set checkpoint.dir="$WORK/ck" --resume auto
grep -q "resumed from .*step_00000020 at step 20" "$WORK/second_half.log" || fail "did not resume at step 20"
echo -n "exact resume, tp=2 pp=2 dp=2 zero_stage 1, dropout 0.1: "
steps_equal second_half straight 0 21 || fail "resumed losses are not bit-identical"
steps_equal first_half straight 0 1 > /dev/null || fail "first half differs"

# 2. Another layout (dropout off: RNG streams only carry over at the same layout).
must_train 8 nodrop "${L222[@]}" --set checkpoint.dir="$WORK/ck_nodrop" --set checkpoint.interval=10 --set checkpoint.keep=4
for layout in "1 tp1_pp1_dp1" "8 tp4_pp1_dp2_zero2 --set parallel.tp=4 --set parallel.zero_stage=2" "4 pp4 --set parallel.pp=4"; do
  set -- $layout
  np="$1" name="$2"
  shift 2
  must_train "$np" "resume_$name" "$@" --resume "$WORK/ck_nodrop/step_00000020"
  grep -q "RNG states not restored" "$WORK/resume_$name.log" || fail "$name should say the RNG states were not restored"
  echo -n "saved at tp=2 pp=2 dp=2 zero_stage 1, resumed at $name: "
  steps_equal "resume_$name" nodrop 1e-5 21 || fail "resuming at $name changed the losses"
done

# 3. Corruption, each refused naming the file; auto falls back to step 10.
expect_refusal() {  # expect_refusal NAME PATTERN: a broken step 20 is refused by --resume PATH, skipped by auto
  local name="$1" pattern="$2" code=0
  train 1 "refuse_$name" --resume "$WORK/broken_$name/step_00000020" --set checkpoint.dir="$WORK/broken_$name" || code=$?
  [ "$code" = 2 ] && grep -q -- "$pattern" "$WORK/refuse_$name.log" ||
    { cat "$WORK/refuse_$name.log"; fail "$name: exit $code, expected 2 and '$pattern'"; }
  must_train 1 "fallback_$name" --resume auto --set checkpoint.dir="$WORK/broken_$name"
  grep -q "refusing checkpoint .*step_00000020" "$WORK/fallback_$name.log" &&
    grep -q "resumed from .*step_00000010 at step 10" "$WORK/fallback_$name.log" ||
    { cat "$WORK/fallback_$name.log"; fail "$name: --resume auto did not fall back to step 10"; }
  echo -n "$name: refused, fell back to step 10; "
  steps_equal "fallback_$name" nodrop 1e-5 11
}
for kind in flip truncate missing; do
  cp -r "$WORK/ck_nodrop" "$WORK/broken_$kind"
  rm -r "$WORK/broken_$kind/step_00000030" "$WORK/broken_$kind/step_00000040"  # step 20 is the newest
done
python3 "$SCRIPTS/checks.py" flip-byte "$WORK/broken_flip/step_00000020/rank_00003.bin"
truncate -s -100 "$WORK/broken_truncate/step_00000020/rank_00005.bin"
rm "$WORK/broken_missing/step_00000020/rank_00007.bin"
expect_refusal flip "rank_00003.bin' fails its CRC-32 check"
expect_refusal truncate "rank_00005.bin' has .* bytes, the manifest says .* (truncated?)"
expect_refusal missing "rank_00007.bin' is missing"

# 4. SIGKILL halfway through saving step 20: step 10 stays the newest complete checkpoint.
if train 8 killed "${L222[@]}" --set checkpoint.dir="$WORK/ck_killed" --set checkpoint.interval=10 --inject-fault 3:20:kill_in_save; then
  fail "the killed job should not succeed"
fi
[ -d "$WORK/ck_killed/.step_00000020.tmp" ] && [ ! -d "$WORK/ck_killed/step_00000020" ] || { ls -a "$WORK/ck_killed"; fail "step 20 should be unpublished"; }
must_train 8 after_kill "${L222[@]}" --set checkpoint.dir="$WORK/ck_killed" --resume auto
grep -q "resumed from .*step_00000010 at step 10" "$WORK/after_kill.log" || { cat "$WORK/after_kill.log"; fail "no resume from step 10"; }
echo -n "killed while saving step 20, resumed from step 10: "
steps_equal after_kill nodrop 1e-5 11

# 5. SIGTERM (and SLURM's USR1 warning, a closed terminal's HUP): the step in flight finishes, is
#    saved, and the job exits 0.
for sig in TERM USR1 HUP; do
  "$LOOM" train "$TINY" --run-dir "$WORK/$sig" "${MODEL[@]}" --set train.steps=100000 --set train.warmup_steps=1 \
    --set checkpoint.dir="$WORK/ck_$sig" > "$WORK/$sig.log" 2>&1 &
  pid=$!
  for _ in $(seq 600); do [ -s "$WORK/$sig/metrics.jsonl" ] && [ "$(wc -l < "$WORK/$sig/metrics.jsonl")" -ge 3 ] && break; sleep 0.1; done
  kill -"$sig" "$pid"
  code=0
  wait "$pid" || code=$?
  [ "$code" = 0 ] || { cat "$WORK/$sig.log"; fail "SIG$sig: exit $code, expected 0"; }
  last=$(tail -1 "$WORK/$sig/metrics.jsonl" | python3 -c 'import json, sys; print(json.load(sys.stdin)["step"])')
  grep -q "stopped by a signal after step $last" "$WORK/$sig.log" &&
    [ -f "$WORK/ck_$sig/step_$(printf %08d "$last")/manifest.json" ] ||
    { cat "$WORK/$sig.log"; ls "$WORK/ck_$sig"; fail "SIG$sig did not save step $last"; }
  echo "SIG$sig after step $last: saved and exited 0"
done

# 6. A script's background job ignores SIGINT (bash sets it so: a Ctrl-C is for the foreground
#    command), and the run keeps it ignored: it trains on through one, and still stops on SIGTERM.
"$LOOM" train "$TINY" --run-dir "$WORK/INT" "${MODEL[@]}" --set train.steps=100000 --set train.warmup_steps=1 \
  --set checkpoint.dir="$WORK/ck_INT" > "$WORK/INT.log" 2>&1 &
pid=$!
rows() { wc -l < "$WORK/INT/metrics.jsonl" 2> /dev/null || echo 0; }
for _ in $(seq 600); do [ "$(rows)" -ge 3 ] && break; sleep 0.1; done
kill -INT "$pid"
at_int=$(rows)
for _ in $(seq 600); do [ "$(rows)" -ge $((at_int + 3)) ] || ! kill -0 "$pid" 2> /dev/null && break; sleep 0.1; done
kill -0 "$pid" 2> /dev/null || { wait "$pid"; cat "$WORK/INT.log"; fail "an ignored SIGINT stopped the run at row $(rows)"; }
kill -TERM "$pid"
code=0
wait "$pid" || code=$?
[ "$code" = 0 ] && grep -q "stopped by a signal after step" "$WORK/INT.log" || { cat "$WORK/INT.log"; fail "SIGTERM after an ignored SIGINT: exit $code"; }
[ "$(rows)" -ge $((at_int + 3)) ] || { cat "$WORK/INT.log"; fail "the run stopped within 3 steps of the ignored SIGINT"; }
echo "an ignored SIGINT at row $at_int: trained on to row $(rows), then SIGTERM saved and exited 0"

# 7. The tied embedding's copies at dp 3 (hidden 128: a bucket of 0.9 MB, past Gloo's one-shot).
TIED=(--set parallel.pp=2 --set model.hidden_size=128 --set train.global_batch_size=12 --set train.steps=20)
must_train 6 tied_straight "${TIED[@]}" --set checkpoint.dir="$WORK/ck_tied" --set checkpoint.interval=10 --set checkpoint.keep=5
must_train 6 tied_resumed "${TIED[@]}" --set checkpoint.dir="$WORK/ck_tied" --resume "$WORK/ck_tied/step_00000010" \
  --set checkpoint.interval=0
echo -n "exact resume, pp=2 dp=3, tied embedding: "
steps_equal tied_resumed tied_straight 0 11 || fail "resumed at pp 2 dp 3 differs: the tied embedding's copies drifted"
# Resumed again in the same run directory at 2 ranks: the 6-rank run's comm_rank2..5.json go.
must_train 2 tied_resumed "${TIED[@]}" --set checkpoint.dir="$WORK/ck_tied" --resume "$WORK/ck_tied/step_00000010" \
  --set checkpoint.interval=0
[ "$(cd "$WORK/tied_resumed" && ls comm_rank*.json | tr '\n' ' ')" = "comm_rank0.json comm_rank1.json " ] ||
  { ls "$WORK/tied_resumed"; fail "a run at 2 ranks left the 6-rank run's comm_rankN.json"; }
echo "checkpoints: ok"
