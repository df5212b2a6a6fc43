#!/usr/bin/env bash
# Nothing a user saved is touched by a run that is refused, and a checkpoint never exists without
# its step's metrics row (issue: operations). Each case: the command, its exit code and message,
# and what must be on disk after.
#  1. A fresh run refused because checkpoint.dir holds checkpoints leaves the run directory's
#     metrics.jsonl, config.yaml and TensorBoard files byte for byte (and a new run directory empty).
#  2. A fresh run into a run directory that holds another run's metrics is refused (exit 2), unless
#     --overwrite-run-dir; beside a resume that finds a checkpoint the flag is said to have no effect.
#  3. Killed halfway through the checkpoint of step 4: step 4's row is in metrics.jsonl; --resume auto
#     continues from step 2 and every step appears once, the dead attempt's rows 3-4 in
#     metrics.superseded.jsonl.
#  4. A torn last row is cut on --resume (the log names metrics.jsonl); every row is JSON after.
#  5. An empty lock file (a crash as it was taken) is taken over with a warning naming it, once it is
#     10 s old (a younger one may be a job taking the lock right now: refused). So is a lock no process
#     holds flock on, whatever pid it names (a reused pid; pid 1 of a restarted container); a held one
#     is refused, also for a loom that is pid 1 of another PID namespace.
#  6. A checkpoint folder without manifest.json is set aside, never deleted; when no checkpoint is
#     left --resume auto refuses (exit 2) naming what it set aside.
#  7. A resume without --run-dir continues the run directory of the run it resumes (also given the
#     step folder with a trailing slash); a copy of its checkpoint.dir resumed elsewhere starts a new
#     one and leaves the original's files as they were (it rewrote its config.yaml and metrics). A
#     fresh run is refused where only a rolled-back metrics.superseded.jsonl is left (it deleted it).
#  8. Raising train.steps on resume says the schedule stretches (old and new values, and the
#     train.lr_decay_steps that avoids it); with train.lr_decay_steps the schedule is unchanged.
#     Another schedule key, train.precision or train.global_batch_size changed on resume is named.
#  9. A resume refused for another model names the key the user changed first (hidden_size, not
#     the ffn_hidden_size derived from it; model.moe.num_experts for an MoE), and every difference;
#     an MoE's router settings that choose experts (top_k, score: they were accepted without a
#     word) too, while its training settings (capacity_factor) may change.
# 10. Absurd sizes are refused before anything is allocated (exit 2, naming the key): a count key
#     at 1e18, and a 1.3e13-parameter model whose estimate exceeds the machine's memory (both numbers
#     and train.memory_check named); the run directory stays empty. Past the check
#     (train.memory_check=false) the failed allocation is said as out of memory, exit 1.
# 11. A fresh run into a directory that holds the user's own config.yaml (not one loom wrote) is
#     refused, naming it, and the file is kept; loom's own config.yaml there (a refused start's) is not.
# 12. A file system out of inodes fails the run as the machine's fault (exit 75), a read-only one at
#     the start as the user's path (exit 2).
source "$(dirname "$0")/common.sh"
ARGS=(--set train.steps=6 --set train.warmup_steps=1 --set log.tensorboard=true)
train() { local name="$1"; shift; "$LOOM" train "$TINY" --run-dir "$WORK/$name" "${ARGS[@]}" "$@" > "$WORK/$name.log" 2>&1; }
must_train() { train "$@" || { cat "$WORK/$1.log"; fail "run $1 failed"; }; }
expect() {  # expect CODE LOG PATTERN ACTUAL_CODE
  [ "$4" = "$1" ] && grep -q -- "$3" "$WORK/$2.log" || { cat "$WORK/$2.log"; fail "$2: exit $4, expected $1 and '$3'"; }
}
digest() { (cd "$1" && find . -type f ! -name '.loom-*' -print0 | sort -z | xargs -0 sha256sum); }
rows() { python3 -c 'import json, sys; print(" ".join(str(json.loads(l)["step"]) for l in open(sys.argv[1])))' "$1"; }

# 1.
must_train first --set checkpoint.dir="$WORK/ck" --set checkpoint.interval=2
before=$(digest "$WORK/first")
code=0
train first --set checkpoint.dir="$WORK/ck" --overwrite-run-dir || code=$?
expect 2 first "checkpoint.dir '$WORK/ck' already holds checkpoints (the newest step_00000006)" $code
[ "$(digest "$WORK/first")" = "$before" ] || fail "a refused run changed its run directory"
code=0
train other --set checkpoint.dir="$WORK/ck" || code=$?
expect 2 other "already holds checkpoints" $code
[ -z "$(ls -A "$WORK/other")" ] || { ls -la "$WORK/other"; fail "a refused run wrote into a new run directory"; }
echo "1. refused for checkpoint.dir: the run directory is byte for byte what it was"

# 2.
code=0
train first || code=$?
expect 2 first "run directory '$WORK/first' holds another run's metrics.jsonl, which a fresh run would replace" $code
[ "$(digest "$WORK/first")" = "$before" ] || fail "a refused run changed its run directory"
must_train first --overwrite-run-dir --set train.steps=3
[ "$(rows "$WORK/first/metrics.jsonl")" = "1 2 3" ] || fail "--overwrite-run-dir should start metrics.jsonl anew"
# ... and its TensorBoard curves: one event file, of the new run's 3 steps (TensorBoard would merge an old one).
[ "$(ls "$WORK/first/tensorboard" | wc -l)" = 1 ] || { ls -la "$WORK/first/tensorboard"; fail "old event files kept"; }
[ ! -e "$WORK/first/.config.yaml.tmp" ] && grep -q "^  steps: 3$" "$WORK/first/config.yaml" || fail "config.yaml not replaced whole"
# With a checkpoint to resume, the flag asks for what the resume does not do: said, not passed over.
must_train first --overwrite-run-dir --resume auto --set checkpoint.dir="$WORK/ck" --set train.steps=7
grep -q "overwrite-run-dir does not start anew: --resume auto continues from a checkpoint, appending to the records of run directory $WORK/first" \
  "$WORK/first.log" || { cat "$WORK/first.log"; fail "--overwrite-run-dir beside a resume passed over without a word"; }
[ "$(rows "$WORK/first/metrics.jsonl")" = "1 2 3 7" ] || fail "the resume's rows: $(rows "$WORK/first/metrics.jsonl")"
echo "2. a used run directory refused, then started anew with --overwrite-run-dir (and a resume says it continues)"

# 3.
code=0
train killed --set checkpoint.dir="$WORK/ck_kill" --set checkpoint.interval=2 --inject-fault 0:4:kill_in_save || code=$?
[ "$code" != 0 ] || fail "the kill in the save of step 4 did not happen"
[ "$(rows "$WORK/killed/metrics.jsonl")" = "1 2 3 4" ] || fail "step 4's row must precede its checkpoint"
must_train killed --set checkpoint.dir="$WORK/ck_kill" --set checkpoint.interval=2 --resume auto
grep -q "resumed from .*step_00000002 at step 2" "$WORK/killed.log" || { cat "$WORK/killed.log"; fail "not resumed at 2"; }
[ "$(rows "$WORK/killed/metrics.jsonl")" = "1 2 3 4 5 6" ] || fail "each step once: $(rows "$WORK/killed/metrics.jsonl")"
[ "$(rows "$WORK/killed/metrics.superseded.jsonl")" = "3 4" ] || fail "the dead attempt's rows 3-4 should be set aside"
grep -q '"checkpoint_step":4' "$WORK/killed/metrics.jsonl" || fail "a save's time goes into the next row"
echo "3. the row of step 4 was written before its checkpoint; resumed, each step once"

# 4.
printf '{"step": 7, "loss": 2.' >> "$WORK/killed/metrics.jsonl"
must_train killed --set checkpoint.dir="$WORK/ck_kill" --set train.steps=8 --resume auto
grep -q "metrics.jsonl was cut back to its last whole row" "$WORK/killed.log" || { cat "$WORK/killed.log"; fail "no cut logged"; }
[ "$(rows "$WORK/killed/metrics.jsonl")" = "1 2 3 4 5 6 7 8" ] || fail "after the cut: $(rows "$WORK/killed/metrics.jsonl")"
echo "4. a torn row cut on resume"

# 5.
mkdir -p "$WORK/locked" && : > "$WORK/locked/.loom-run.lock"
code=0
train locked || code=$?  # a young empty lock may be a job taking it right now
expect 2 locked "is being locked by another loom job right now" $code
touch -d '1 minute ago' "$WORK/locked/.loom-run.lock"
must_train locked
grep -q "taking over the lock $WORK/locked/.loom-run.lock of run directory '$WORK/locked' left by no owner it names" \
  "$WORK/locked.log" || { cat "$WORK/locked.log"; fail "an empty lock should be taken over with a warning"; }
# A lock names its holder, who holds flock on it while the job runs. One that names a live process
# that holds no flock on it (its pid reused by a sleep here; pid 1, as in a restarted container where
# loom is pid 1 again) is taken over; one held is refused, even when it names pid 1 and this job is
# pid 1 of its own PID namespace (two containers beside each other).
# (Background helpers write nowhere, so that ctest does not wait on them if a check fails first.)
sleep 300 > /dev/null 2>&1 &
sleeper=$!
lock() { printf '{"host": "%s", "pid": %s, "job": "", "boot": "%s", "started": "1"}\n' "$(hostname)" "$1" \
  "$(cat /proc/sys/kernel/random/boot_id)" > "$WORK/$2/.loom-run.lock"; }
mkdir -p "$WORK/reused" "$WORK/held" "$WORK/container" "$WORK/beside"
lock "$sleeper" reused
must_train reused
grep -q "left by process $sleeper, no longer running (it holds no lock on the file)" "$WORK/reused.log" ||
  { cat "$WORK/reused.log"; fail "a lock that no process holds should be taken over"; }
kill "$sleeper"
lock 1 container
unshare --pid --fork --mount-proc "$LOOM" train "$TINY" --run-dir "$WORK/container" "${ARGS[@]}" > "$WORK/container.log" 2>&1 ||
  { cat "$WORK/container.log"; fail "a restarted container's loom (pid 1 again) should take over its lock"; }
grep -q "left by process 1, no longer running" "$WORK/container.log" ||
  { cat "$WORK/container.log"; fail "the container's lock was not taken over by name"; }
for dir in held beside; do
  lock 1 "$dir"
  python3 -c 'import fcntl, sys, time; f = open(sys.argv[1], "a"); fcntl.flock(f, fcntl.LOCK_EX); time.sleep(300)' \
    "$WORK/$dir/.loom-run.lock" > /dev/null 2>&1 &
  holders+=($!)
done
for _ in $(seq 100); do flock -n "$WORK/held/.loom-run.lock" true || break; sleep 0.1; done
for _ in $(seq 100); do flock -n "$WORK/beside/.loom-run.lock" true || break; sleep 0.1; done
code=0
train held || code=$?
expect 2 held "is in use by another loom job (host $(hostname), pid 1)" $code
code=0
unshare --pid --fork --mount-proc "$LOOM" train "$TINY" --run-dir "$WORK/beside" "${ARGS[@]}" > "$WORK/beside.log" 2>&1 ||
  code=$?
expect 2 beside "is in use by another loom job (host $(hostname), pid 1)" $code
# Two launches of one scheduler job (two srun steps of one sbatch script): a held lock of the same
# attempt is a live job's and is refused; a requeued attempt (SLURM_RESTART_COUNT 1) takes it over.
mkdir -p "$WORK/step"
printf '{"host": "%s", "pid": 1, "job": "slurm:4242", "attempt": 0, "boot": "%s", "started": "1"}\n' "$(hostname)" \
  "$(cat /proc/sys/kernel/random/boot_id)" > "$WORK/step/.loom-run.lock"
python3 -c 'import fcntl, sys, time; f = open(sys.argv[1], "a"); fcntl.flock(f, fcntl.LOCK_EX); time.sleep(300)' \
  "$WORK/step/.loom-run.lock" > /dev/null 2>&1 &
holders+=($!)
for _ in $(seq 100); do flock -n "$WORK/step/.loom-run.lock" true || break; sleep 0.1; done
code=0
SLURM_JOB_ID=4242 train step || code=$?
expect 2 step "is in use by another loom job" $code
SLURM_JOB_ID=4242 SLURM_RESTART_COUNT=1 must_train step
grep -q "left by an earlier attempt of this job (slurm:4242)" "$WORK/step.log" ||
  { cat "$WORK/step.log"; fail "a requeued attempt should take over its earlier attempt's lock"; }
kill "${holders[@]}"
echo "5. an empty lock taken over, named; one no process holds too, a held one not (pid 1 beside pid 1 neither)"

# 6.
must_train nomanifest --set checkpoint.dir="$WORK/ck_nm" --set checkpoint.interval=2 --set checkpoint.keep=2 --set train.exit_after=4
rm "$WORK/ck_nm/step_00000004/manifest.json"
must_train nomanifest --set checkpoint.dir="$WORK/ck_nm" --set checkpoint.keep=2 --resume auto
grep -q "refusing checkpoint $WORK/ck_nm/step_00000004: it has no manifest.json; set aside as $WORK/ck_nm/step_00000004.corrupt" \
  "$WORK/nomanifest.log" && grep -q "resumed from .*step_00000002 at step 2" "$WORK/nomanifest.log" ||
  { cat "$WORK/nomanifest.log"; fail "the folder without a manifest: not set aside, or no fallback"; }
[ -f "$WORK/ck_nm/step_00000004.corrupt/rank_00000.bin" ] || fail "its shards must stay"
must_train keep1 --set checkpoint.dir="$WORK/ck_k1" --set checkpoint.interval=2 --set checkpoint.keep=1 --set train.exit_after=4
rm "$WORK"/ck_k1/step_*/manifest.json  # step 4, and step 2 which keep 1 kept as the newest verified
code=0
train keep1 --set checkpoint.dir="$WORK/ck_k1" --set checkpoint.keep=1 --resume auto || code=$?
expect 2 keep1 "--resume auto: checkpoint.dir '$WORK/ck_k1' holds no usable checkpoint: .*step_00000004.corrupt" $code
[ -f "$WORK/ck_k1/step_00000004.corrupt/rank_00000.bin" ] || fail "its shards must stay"
[ "$(rows "$WORK/keep1/metrics.jsonl")" = "1 2 3 4" ] || fail "a refused resume changed metrics.jsonl"
# The same job restarted (a requeue): nothing left to set aside, but 'latest' names what was.
code=0
train keep1 --set checkpoint.dir="$WORK/ck_k1" --set checkpoint.keep=1 --resume auto || code=$?
expect 2 keep1 "holds no usable checkpoint, but a run saved there: its 'latest' names step_00000004, .*step_00000004.corrupt (set aside)" $code
# ... and so without 'latest' (checkpoints copied without it): the set-aside folders say a run saved here.
rm "$WORK/ck_k1/latest"
code=0
train keep1 --set checkpoint.dir="$WORK/ck_k1" --set checkpoint.keep=1 --resume auto || code=$?
expect 2 keep1 "holds no usable checkpoint, but a run saved there: $WORK/ck_k1/step_00000002.corrupt (set aside)" $code
[ "$(rows "$WORK/keep1/metrics.jsonl")" = "1 2 3 4" ] || fail "a restarted refused resume changed metrics.jsonl"
echo "6. a folder without a manifest set aside; with nothing usable --resume auto refuses, and again when restarted"

# 7.
must_train origin --set checkpoint.dir="$WORK/ck_origin" --set checkpoint.interval=2 --set train.exit_after=4
(cd "$WORK" && "$LOOM" train "$TINY" "${ARGS[@]}" --set checkpoint.dir="$WORK/ck_origin" --resume auto > "$WORK/resumed.log" 2>&1) ||
  { cat "$WORK/resumed.log"; fail "the resume without --run-dir failed"; }
grep -q "continuing the run directory $WORK/origin (the resumed run's)" "$WORK/resumed.log" ||
  { cat "$WORK/resumed.log"; fail "the resume should say which run directory it continues"; }
[ "$(rows "$WORK/origin/metrics.jsonl")" = "1 2 3 4 5 6" ] && [ ! -e "$WORK/runs" ] ||
  fail "a resume without --run-dir should continue the resumed run's directory: $(rows "$WORK/origin/metrics.jsonl")"
before=$(digest "$WORK/origin")
cp -r "$WORK/ck_origin" "$WORK/ck_copy"
echo step_00000004 > "$WORK/ck_copy/latest"
(cd "$WORK" && "$LOOM" train "$TINY" "${ARGS[@]}" --set checkpoint.dir="$WORK/ck_copy" --set train.lr=1e-3 --resume auto \
  > "$WORK/branch.log" 2>&1) || { cat "$WORK/branch.log"; fail "the resume of a copied checkpoint.dir failed"; }
! grep -q "continuing the run directory" "$WORK/branch.log" && [ "$(digest "$WORK/origin")" = "$before" ] ||
  { cat "$WORK/branch.log"; fail "the branch from a copied checkpoint.dir wrote into the original's run directory"; }
(cd "$WORK" && "$LOOM" train "$TINY" "${ARGS[@]}" --set checkpoint.dir="$WORK/ck_origin" \
  --resume "$WORK/ck_origin/step_00000004/" > "$WORK/slash.log" 2>&1) || { cat "$WORK/slash.log"; fail "--resume .../step_00000004/ failed"; }
grep -q "continuing the run directory $WORK/origin (the resumed run's)" "$WORK/slash.log" &&
  [ "$(cat "$WORK/ck_origin/latest")" = step_00000006 ] && [ "$(rows "$WORK/origin/metrics.jsonl")" = "1 2 3 4 5 6" ] ||
  { cat "$WORK/slash.log"; fail "--resume with a trailing slash should continue the run as without it"; }
mkdir -p "$WORK/superseded"
: > "$WORK/superseded/metrics.jsonl"
echo '{"step": 1, "loss": 5.0}' > "$WORK/superseded/metrics.superseded.jsonl"
code=0
train superseded || code=$?
expect 2 superseded "holds another run's metrics.superseded.jsonl, which a fresh run would replace" $code
[ -s "$WORK/superseded/metrics.superseded.jsonl" ] || fail "a refused fresh run deleted metrics.superseded.jsonl"
echo "7. a resume without --run-dir continued the resumed run's directory (a trailing slash too); a copied checkpoint.dir's did not; rolled-back rows refuse a fresh run"

# 8. Raising train.steps on resume says what it does to the schedule; train.lr_decay_steps keeps it.
must_train sched --set checkpoint.dir="$WORK/ck_sched" --set train.exit_after=4
must_train sched --set checkpoint.dir="$WORK/ck_sched" --set train.steps=12 --resume auto
grep -q "train.steps changed from 6 (the checkpoint's) to 12: the learning-rate decay stretches over the new length" \
  "$WORK/sched.log" && grep -q "set train.lr_decay_steps = 5" "$WORK/sched.log" ||
  { cat "$WORK/sched.log"; fail "raising train.steps on resume should say the schedule stretches"; }
must_train sched2 --set checkpoint.dir="$WORK/ck_sched2" --set train.exit_after=4 --set train.lr_decay_steps=5
must_train sched2 --set checkpoint.dir="$WORK/ck_sched2" --set train.steps=12 --set train.lr_decay_steps=5 --resume auto
grep -q "train.steps changed from 6 (the checkpoint's) to 12; with train.lr_decay_steps = [0-9]* the learning-rate schedule does not depend on train.steps" "$WORK/sched2.log" ||
  { cat "$WORK/sched2.log"; fail "with train.lr_decay_steps the schedule should be unchanged"; }
python3 - "$WORK/sched2/metrics.jsonl" << 'EOF'
import json, sys
lr = {r["step"]: r["lr"] for r in map(json.loads, open(sys.argv[1]))}
# warm-up 1, decay over 5 steps (2-6) to min_lr, then min_lr: the extension trains at min_lr.
assert abs(lr[6] - lr[12]) < 1e-12 and lr[5] > lr[6], f"lr {lr}"
EOF
# Lowering it shrinks the decay, said as such (it was called a stretch, with advice to extend the run).
must_train sched3 --set checkpoint.dir="$WORK/ck_sched3" --set train.steps=12 --set train.exit_after=4
must_train sched3 --set checkpoint.dir="$WORK/ck_sched3" --resume auto
grep -q "train.steps changed from 12 (the checkpoint's) to 6: the learning-rate decay shrinks to the new length" \
  "$WORK/sched3.log" || { cat "$WORK/sched3.log"; fail "lowering train.steps on resume should say the schedule shrinks"; }
# Another learning-rate key edited between two attempts is named, with the lr before and after.
must_train sched4 --set checkpoint.dir="$WORK/ck_sched4" --set train.exit_after=4
must_train sched4 --set checkpoint.dir="$WORK/ck_sched4" --set train.warmup_steps=3 --resume auto
grep -q "the learning-rate schedule changed since the checkpoint (train.warmup_steps [0-9]* -> 3): the lr at step 5 is" \
  "$WORK/sched4.log" || { cat "$WORK/sched4.log"; fail "a changed train.warmup_steps on resume was not said"; }
# Both at once: one line, train.steps among the keys, the lr on the two whole schedules.
must_train sched4 --set checkpoint.dir="$WORK/ck_sched4" --set train.warmup_steps=2 --set train.steps=12 --resume auto
grep -q "the learning-rate schedule changed since the checkpoint (train.warmup_steps 3 -> 2, train.steps 6 -> 12): the lr at step 7 is" \
  "$WORK/sched4.log" && ! grep -q "train.steps changed from" "$WORK/sched4.log" ||
  { cat "$WORK/sched4.log"; fail "a changed train.warmup_steps and train.steps on resume were not said in one line"; }
# So are the other settings that change the numbers to come (precision, batch size, clipping).
must_train sched5 --set checkpoint.dir="$WORK/ck_sched5" --set train.exit_after=4
must_train sched5 --set checkpoint.dir="$WORK/ck_sched5" --set train.precision=bf16 --set train.global_batch_size=16 \
  --resume auto
grep -q "training settings changed since the checkpoint (train.precision fp32 -> bf16, train.global_batch_size [0-9]* -> 16): the steps from 5 train with the new values" \
  "$WORK/sched5.log" || { cat "$WORK/sched5.log"; fail "a changed train.precision on resume was not said"; }
grep -q "training settings changed" "$WORK/sched.log" && fail "a resume that changed no setting said one changed"
# A key the rest of the config turns off (the balance loss of a dense model) changes nothing, and is
# not said to; a value is said in full (not 0.003 -> 0.003).
must_train sched6 --set checkpoint.dir="$WORK/ck_sched6" --set train.exit_after=4
must_train sched6 --set checkpoint.dir="$WORK/ck_sched6" --set model.moe.aux_loss_coeff=0.02 --set train.lr=0.0030000001 \
  --resume auto
grep -q "training settings changed" "$WORK/sched6.log" && { cat "$WORK/sched6.log"; fail "an inert key was said to change the training"; }
grep -q "the learning-rate schedule changed since the checkpoint (train.lr 0.003 -> 0.0030000001)" "$WORK/sched6.log" ||
  { cat "$WORK/sched6.log"; fail "a changed lr should be said in full"; }
echo "8. raising train.steps on resume: the stretch named with train.lr_decay_steps to avoid it; with it, unchanged; lowering it: a shrink; another lr key, precision, batch size: named"
# 9.
must_train shape --set checkpoint.dir="$WORK/ck_shape" --set train.exit_after=2
code=0
train shape --set checkpoint.dir="$WORK/ck_shape" --set model.hidden_size=64 --resume auto || code=$?
expect 2 shape "the checkpoint has model.hidden_size = 32, the config 64; model.ffn_hidden_size = 128, the config 256" $code
code=0
train shape --set checkpoint.dir="$WORK/ck_shape" --set model.moe.num_experts=2 --resume auto || code=$?
expect 2 shape "the checkpoint has model.moe.num_experts = 0, the config 2" $code
MOE=(--set checkpoint.dir="$WORK/ck_router" --set model.moe.num_experts=4 --set model.moe.top_k=2)
must_train router "${MOE[@]}" --set train.exit_after=2
code=0
train router "${MOE[@]}" --set model.moe.top_k=1 --set model.moe.score=sigmoid --resume auto || code=$?
expect 2 router 'the checkpoint has model.moe.top_k = 2, the config 1; model.moe.score = "softmax", the config "sigmoid"' $code
must_train router "${MOE[@]}" --set model.moe.capacity_factor=1.5 --resume auto
echo "9. a refused resume names hidden_size before the ffn_hidden_size derived from it, model.moe.num_experts, and the router's top_k and score; capacity_factor may change"
# 10.
for key in model.hidden_size model.ffn_hidden_size model.moe.num_experts model.vocab_size model.num_layers \
  train.global_batch_size eval.steps; do
  code=0
  train "absurd_$key" --set "$key=1000000000000000000" || code=$?
  expect 2 "absurd_$key" "config key '$key': is 1000000000000000000, more than loom accepts" $code
  [ -z "$(ls -A "$WORK/absurd_$key" 2> /dev/null)" ] || fail "$key: a refused run wrote into its run directory"
done
code=0
train trillion --set model.hidden_size=65536 --set model.num_heads=512 --set model.num_layers=256 || code=$?
expect 2 trillion "the model does not fit: loom plan's estimate is [0-9.]* GB per rank ([0-9.e+]* parameters" $code
expect 2 trillion "more than this .* of [0-9.]* GB. Its size is model.num_layers = 256, model.hidden_size = 65536" $code
expect 2 trillion "set train.memory_check=false to train anyway" $code
[ -z "$(ls -A "$WORK/trillion" 2> /dev/null)" ] || fail "the refused trillion-parameter run wrote into its run directory"
# Past the check (train.memory_check=false), the allocation that fails is said as out of memory with
# what makes a rank need less, exit 1. (ulimit -v: it fails alike on a machine with more memory.)
code=0
(ulimit -v 8000000 && train trillion_unchecked --set model.hidden_size=65536 --set model.num_heads=512 \
  --set model.num_layers=256 --set train.memory_check=false) || code=$?
expect 1 trillion_unchecked "loom: error: out of memory: .*can't allocate memory: you tried to allocate" $code
expect 1 trillion_unchecked "needs less with a smaller train.micro_batch_size, train.recompute selective or full" $code
echo "10. absurd sizes refused before allocating, naming the keys and both memory figures"
mkdir -p "$WORK/mine"
printf '# my notes\n' > "$WORK/mine/config.yaml"
code=0
train mine || code=$?
expect 2 mine "run directory '$WORK/mine' holds a config.yaml that loom did not write" $code
grep -q "my notes" "$WORK/mine/config.yaml" || fail "the user's config.yaml was replaced"
must_train mine --overwrite-run-dir
rm "$WORK/mine/metrics.jsonl"  # loom's config.yaml without metrics (a start refused later): no refusal
must_train mine
echo "11. the user's config.yaml in the run directory kept, refused naming it"

# 12. A file system that fails the job is the machine's fault (exit 75, requeue), not bad input: a
#     checkpoint.dir out of inodes when the lock is taken (2 inodes: the mount's root and the folder)
#     or when the first save makes its folder (3: and the lock). A read-only one at the start is the
#     path the user chose (exit 2). Each in a private mount namespace, on a tmpfs of its own.
mkdir -p "$WORK/mnt"
for case in "nr_inodes=2 75 cannot create the lock file '$WORK/mnt/ck/.loom-checkpoints.lock'.*No space left" \
  "nr_inodes=3 75 checkpoint.dir: cannot create '$WORK/mnt/ck/.step_00000002.tmp': No space left" \
  "ro 2 cannot create checkpoint.dir '$WORK/mnt/ck': Read-only file system"; do
  read -r options want pattern <<< "$case"
  name="fs_${options//[=,]/_}"
  code=0
  unshare -m sh -c 'mount -t tmpfs -o "size=8M,$1" tmpfs "$2" && shift 2 && exec "$@"' sh "$options" "$WORK/mnt" \
    "$LOOM" train "$TINY" --run-dir "$WORK/$name" "${ARGS[@]}" --set checkpoint.dir="$WORK/mnt/ck" \
    --set checkpoint.interval=2 > "$WORK/$name.log" 2>&1 || code=$?
  expect "$want" "$name" "$pattern" $code
done
echo "12. a full file system's failures exit 75 (the lock, the first save's folder); a read-only one at the start 2"
echo "run_dir_safety: ok"
