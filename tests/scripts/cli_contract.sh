#!/usr/bin/env bash
# The command-line contract: exit codes, messages that name the culprit,
# `loom topology` output, and `loom prepare` feeding `loom train`.
source "$(dirname "$0")/common.sh"

expect_exit 2 "usage:" "$LOOM"
expect_exit 2 "unknown command 'trian'" "$LOOM" trian
expect_exit 2 "cannot read config file '/nope.yaml'" "$LOOM" train /nope.yaml
expect_exit 2 "unknown command 'trian'; did you mean 'train'?" "$LOOM" trian
# Help and the version exit 0; `loom train --help` lists every config key (type, default, meaning)
# from the table the parser reads.
version=$(sed -n 's/^project(loom VERSION \([0-9.]*\).*/\1/p' "$LOOM_SOURCE/CMakeLists.txt")
expect_exit 0 "^loom $version\$" "$LOOM" --version
# This suite's build: the wheel's LibTorch with the CUDA runtime and NCCL compiled in.
expect_exit 0 "^LibTorch 2\.[0-9.]*, CUDA: yes ([0-9.]*), NCCL: yes ([0-9.]*)\$" "$LOOM" --version
expect_exit 0 "usage: loom \[OPTIONS\] SUBCOMMAND" "$LOOM" --help
for command in train topology schedule plan export prepare; do
  expect_exit 0 "usage: loom $command" "$LOOM" "$command" --help
done
expect_exit 0 "^  train.steps  *int  *100  *optimizer steps$" "$LOOM" train --help
expect_exit 0 "^  model.init_from  *string  *\"\"  *Hugging Face model directory" "$LOOM" train --help
expect_exit 0 "--inject-fault RANK:STEP:KIND" "$LOOM" train --help
# Flags: CLI11's complaints become loom's one-line errors and exit 2, naming the flag.
expect_exit 2 "loom train: the following argument was not expected: --bogus" "$LOOM" train "$TINY" --bogus
expect_exit 2 "loom train: --set: 1 required KEY=VALUE missing" "$LOOM" train "$TINY" --set
expect_exit 2 "loom train: CONFIG.yaml is required" "$LOOM" train --set train.steps=2
expect_exit 2 "unknown flag '--set'" "$LOOM" --set train.steps=2
expect_exit 2 "--world expects an integer of at least 1, got 'x'" "$LOOM" topology "$TINY" --world x
# A fault that could never fire is refused, not silently left out of the run.
expect_exit 2 "--inject-fault 0:21:kill: step 21 is past the run's last (train.steps = 20)" "$LOOM" train "$TINY" --inject-fault 0:21:kill
expect_exit 2 "--inject-fault 0:3:kill_in_save: step 3 saves no checkpoint (checkpoint.dir '$WORK/never', checkpoint.interval = 2, train.steps = 20); pick a step that saves, or the fault never fires" \
  "$LOOM" train "$TINY" --set checkpoint.dir="$WORK/never" --set checkpoint.interval=2 --inject-fault 0:3:kill_in_save
expect_exit 2 "--inject-fault 0:20:fail_save: step 20 saves no checkpoint (checkpoint.dir ''" "$LOOM" train "$TINY" --inject-fault 0:20:fail_save
expect_exit 2 "--inject-fault 0:6:kill: step 6 is past where the run stops (train.exit_after = 4)" "$LOOM" train "$TINY" \
  --set train.exit_after=4 --set checkpoint.dir="$WORK/never" --inject-fault 0:6:kill
expect_exit 2 "--inject-fault KIND must be kill, hang, kill_in_save, fail_save, overflow, slow, scale:GROUP:EPS, delay:GROUP:MS, slow-data:MS, slow_save:MS, slow_resume:MS or straggler:RANK:MS" "$LOOM" train "$TINY" --inject-fault 0:1:boom
expect_exit 2 "needs GROUP tp, cp, dp, pp or ep" "$LOOM" train "$TINY" --inject-fault 0:1:scale:xp:1e-3
expect_exit 2 "--inject-fault expects RANK:STEP:KIND, got ''" "$LOOM" train "$TINY" --inject-fault ''
expect_exit 2 "scale:tp:EPS needs a number above -1" "$LOOM" train "$TINY" --inject-fault 0:1:scale:tp:big
expect_exit 2 "loom plan: CONFIG.yaml excludes --run" "$LOOM" plan "$TINY" --run "$WORK"
expect_exit 2 "loom plan: CONFIG.yaml or --run RUN_DIR is required" "$LOOM" plan
expect_exit 2 "loom export: --output is required" "$LOOM" export "$WORK/nope"
expect_exit 2 "loom prepare: --output is required" "$LOOM" prepare --input "$WORK/none.txt"
expect_exit 2 "--format 'onnx' is not known; use hf, hf-llama or hf-gpt2" "$LOOM" export "$WORK/nope" --format onnx --output "$WORK/x.onnx"
# Megatron-LM's names, typed by habit, point at loom's keys.
expect_exit 2 "--set train_iters=5: unknown key 'train_iters'; did you mean 'train.steps'?" "$LOOM" train "$TINY" --set train_iters=5
expect_exit 2 "did you mean 'parallel.tp'?" "$LOOM" topology "$TINY" --world 2 --set tensor_model_parallel_size=2
printf 'seq_length: 128\n' > "$WORK/megatron.yaml"
expect_exit 2 "unknown key 'seq_length'; did you mean 'model.seq_len'?" "$LOOM" train "$WORK/megatron.yaml"
expect_exit 2 "did you mean 'parallel.cp'?" "$LOOM" train "$TINY" --set context_parallel_size=2
expect_exit 2 "did you mean 'train.micro_batch_size'" "$LOOM" train "$TINY" --set train.micro_batch=2
expect_exit 2 "'train.global_batch_size'" "$LOOM" train "$TINY" --set train.global_batch_size=7
expect_exit 2 "'parallel.dp'" "$LOOM" train "$TINY" --set parallel.dp=2
expect_exit 2 "not implemented in this version" "$LOOM" train "$TINY" --set train.precision=fp16 --set model.moe.num_experts=4
expect_exit 2 "data.path" "$LOOM" train "$TINY" --set data.path="$WORK/missing"
expect_exit 2 "'parallel.virtual_stages'" "$LOOM" train "$TINY" --set parallel.schedule=interleaved
expect_exit 2 "12 layers would split; so would pp \* virtual_stages of 1, 2, 3 or 6" "$LOOM" topology "$TINY" --world 3 --set parallel.pp=3 --set model.num_layers=6 \
  --set parallel.virtual_stages=4 --set parallel.schedule=interleaved
expect_exit 2 "checkpoint '$WORK/nope' does not exist" "$LOOM" export "$WORK/nope" --output "$WORK/x.safetensors"
mkdir -p "$WORK/ck_list/step_00000150" "$WORK/ck_list/step_00000200"
expect_exit 2 "checkpoint '$WORK/ck_list/step_00000050' does not exist (checkpoint.keep deletes older steps; '$WORK/ck_list' holds step_00000150, step_00000200)" \
  "$LOOM" train "$TINY" --resume "$WORK/ck_list/step_00000050"
expect_exit 2 "checkpoint '$WORK/ck_list/step_00000150' has no manifest.json" "$LOOM" export "$WORK/ck_list/step_00000150" --output "$WORK/x"
# A resume that names nothing is refused before the run's folders are made; an empty --resume or
# --output (an unset variable) names nothing, and was taken for no --resume, or failed unnamed.
expect_exit 2 "--resume $WORK/ck_list/step_00000050: checkpoint" "$LOOM" train "$TINY" --resume "$WORK/ck_list/step_00000050" \
  --run-dir "$WORK/refused_run" --set checkpoint.dir="$WORK/refused_ck"
[ ! -e "$WORK/refused_run" ] && [ ! -e "$WORK/refused_ck" ] || fail "a refused --resume left its run or checkpoint folder"
expect_exit 2 "--resume: is empty: give auto or a checkpoint" "$LOOM" train "$TINY" --resume ""
expect_exit 2 "--output is empty" "$LOOM" export "$WORK/ck_list/step_00000150" --output ""
expect_exit 2 "model.init_from: '$WORK/none.safetensors' does not exist" "$LOOM" train "$TINY" --set model.init_from="$WORK/none.safetensors"
expect_exit 2 "'checkpoint.dir'" "$LOOM" train "$TINY" --set train.exit_after=3
# This LibTorch is CPU-only: asking for a GPU or for NCCL is refused up front, naming the key.
expect_exit 2 "'train.device': cuda, but this LibTorch sees no GPU" "$LOOM" train "$TINY" --set train.device=cuda
expect_exit 2 "'parallel.backend': nccl moves GPU tensors" "$LOOM" train "$TINY" --set parallel.backend=nccl
expect_exit 2 "--resume auto needs checkpoint.dir" "$LOOM" train "$TINY" --resume auto
expect_exit 0 "checkpoint.dir '$WORK/ck_empty' does not exist, so there is nothing to resume: starting fresh" "$LOOM" train "$TINY" --run-dir "$WORK/fresh" \
  --set checkpoint.dir="$WORK/ck_empty" --set train.steps=2 --set train.warmup_steps=1 --resume auto
expect_exit 2 "cannot read cluster file '$WORK/none.yaml'" "$LOOM" plan "$TINY" --cluster "$WORK/none.yaml"
expect_exit 2 "cannot read cluster file '$WORK': a directory" "$LOOM" plan "$TINY" --cluster "$WORK"
expect_exit 0 "decision order check: tp inside a node: yes" "$LOOM" plan "$LOOM_SOURCE/configs/gpt3_175b.yaml" \
  --cluster "$LOOM_SOURCE/configs/clusters/h100_sxm_8x_ib.yaml" --world 1024
expect_exit 0 "zero_stage 3: " "$LOOM" plan "$TINY" --world 8
expect_exit 0 "zero_stage 3: " "$LOOM" plan "$TINY" --world 8 --set parallel.pp=2
expect_exit 2 "world expects an integer of at most 1073741824, got '99999999999999999999'" \
  "$LOOM" plan "$TINY" --world 99999999999999999999
expect_exit 2 "world size 3 is not divisible by tp \* cp \* pp = 2" "$LOOM" plan "$TINY" --world 3 --set parallel.tp=2
# The config's own layout at a world whose dp does not divide its batch: said, not weighed as NaN.
CLOUD="$LOOM_SOURCE/configs/clusters/cloud_8x_a100_100gbe.yaml"
expect_exit 0 "global_batch_size 8 is not a multiple of micro_batch_size 2 x dp 16" "$LOOM" plan "$TINY" \
  --cluster "$CLOUD" --world 16
if "$LOOM" plan "$TINY" --cluster "$CLOUD" --world 16 2>&1 | grep -qiE '(^|[^a-z])-?nan([^a-z]|$)'; then
  echo "FAIL: loom plan printed NaN for a layout that does not divide the batch"
  exit 1
fi
# The Llama configs read by the planner, each with its published parameter count.
H100="$LOOM_SOURCE/configs/clusters/h100_sxm_8x_ib.yaml"
expect_exit 0 "on 64 GPUs of .*; 1,100,048,384 parameters" "$LOOM" plan "$LOOM_SOURCE/configs/tinyllama_1_1b.yaml" \
  --cluster "$H100" --world 64
expect_exit 0 "decision order check: tp inside a node: yes" "$LOOM" plan "$LOOM_SOURCE/configs/tinyllama_1_1b.yaml" \
  --cluster "$H100" --world 64
expect_exit 0 "; 1,235,814,400 parameters" "$LOOM" plan "$LOOM_SOURCE/configs/llama3_2_1b.yaml" --cluster "$H100" --world 64
expect_exit 0 "; 134,515,008 parameters" "$LOOM" plan "$LOOM_SOURCE/configs/smollm2_135m.yaml" --cluster "$H100" --world 8
# The MoE shape configs: the total and the activated parameters per token, as their releases publish them.
expect_exit 0 "; 46,702,792,704 parameters (12,879,925,248 activated per token)" "$LOOM" plan \
  "$LOOM_SOURCE/configs/mixtral_8x7b.yaml" --cluster "$H100" --world 64
expect_exit 0 "; 30,532,122,624 parameters (3,353,032,704 activated per token)" "$LOOM" plan \
  "$LOOM_SOURCE/configs/qwen3_30b_a3b.yaml" --cluster "$H100" --world 64
expect_exit 0 "(of 1,100,048,384, tp=1 pp=1)" "$LOOM" plan "$LOOM_SOURCE/configs/tinyllama_1_1b.yaml" --world 8
expect_exit 2 "--world" "$LOOM" topology "$TINY"
# loom schedule shows a layout's bubble before it runs: p=2, m=4 gives 1/5.
"$LOOM" schedule "$TINY" --set parallel.pp=2 > "$WORK/schedule.txt" || fail "loom schedule"
grep -q "^stage 1 |" "$WORK/schedule.txt" && grep -q "bubble 20.0% of the step (formula (p-1)/(m\*v+p-1) = 20.0%)" "$WORK/schedule.txt" ||
  { cat "$WORK/schedule.txt"; fail "loom schedule output"; }
expect_exit 2 "not divisible by tp \* cp \* pp = 4" "$LOOM" topology "$TINY" --world 6 --set parallel.tp=2 --set parallel.pp=2
expect_exit 2 "'model.num_heads'" "$LOOM" topology "$TINY" --world 3 --set parallel.tp=3
expect_exit 2 "cannot read input file" "$LOOM" prepare --input "$WORK/none.txt" --output "$WORK/ds"
printf 'model: [1, 2\n' > "$WORK/bad.yaml"
expect_exit 2 "not valid YAML" "$LOOM" train "$WORK/bad.yaml"
printf 'model:\n  num_layers: 2\n  num_layers: 3\n' > "$WORK/twice.yaml"
expect_exit 2 "key 'model.num_layers' appears twice" "$LOOM" train "$WORK/twice.yaml"
expect_exit 2 "config file '$WORK' is a directory" "$LOOM" train "$WORK"
expect_exit 2 "'parallel.timeout_s': must be positive and at most" "$LOOM" train "$TINY" --set parallel.timeout_s=1e300
# prepare checks its inputs before writing: a directory is refused, and nothing partial is left
# beside a dataset a failed run would have replaced.
expect_exit 2 "input '$WORK' is a directory" "$LOOM" prepare --input "$WORK" --output "$WORK/from_dir"
[ -z "$(ls "$WORK" | grep '^from_dir')" ] || fail "prepare of a directory left files behind"
printf 'good' > "$WORK/good.txt"
"$LOOM" prepare --input "$WORK/good.txt" --output "$WORK/kept" > /dev/null || fail "prepare good.txt"
cp "$WORK/kept.bin" "$WORK/kept.bin.before"
expect_exit 2 "cannot read input file" "$LOOM" prepare --input "$WORK/good.txt" "$WORK/none.txt" --output "$WORK/kept"
cmp -s "$WORK/kept.bin" "$WORK/kept.bin.before" && [ ! -e "$WORK/kept.bin.tmp" ] ||
  fail "a failed prepare changed the existing dataset or left a temporary"

# Topology of tp=2 pp=2 dp=2 on 8 ranks, as written out by hand.
"$LOOM" topology "$TINY" --world 8 --set parallel.tp=2 --set parallel.pp=2 > "$WORK/topo.json"
python3 "$SCRIPTS/checks.py" topology-tp2-pp2-dp2 "$WORK/topo.json" || fail "topology of tp=2 pp=2 dp=2"

# prepare -> train on the prepared data, and the run directory's contents.
for i in 1 2 3; do head -c 3000 "$LOOM_SOURCE/CMakeLists.txt" > "$WORK/doc$i.txt"; done
"$LOOM" prepare --input "$WORK"/doc*.txt --output "$WORK/ds" --append-eod | grep -q "3 documents" || fail "prepare summary"
"$LOOM" train "$TINY" --run-dir "$WORK/run" --set data.path="$WORK/ds" --set model.vocab_size=257 \
  --set train.steps=3 --set train.warmup_steps=1 --set data.order=shuffled > "$WORK/train.log" 2>&1 ||
  { cat "$WORK/train.log"; fail "training on a prepared dataset"; }
[ "$(wc -l < "$WORK/run/metrics.jsonl")" = 3 ] || fail "metrics.jsonl should have 3 lines"
grep -q 'path: ".*ds"' "$WORK/run/config.yaml" || fail "resolved config.yaml lacks data.path"
grep -q 'dp: 1' "$WORK/run/config.yaml" || fail "resolved config.yaml lacks the resolved dp"
# loom plan --run on a damaged traffic.json: exit 2 naming it, not a JSON library's message and exit 1.
cp -r "$WORK/run" "$WORK/run_damaged"
echo '[]' > "$WORK/run_damaged/traffic.json"
expect_exit 2 "'$WORK/run_damaged/traffic.json' is not a traffic report as loom writes it" "$LOOM" plan --run \
  "$WORK/run_damaged"
# A run that evaluated is refused (the cost model has no evaluation), not reported as differing.
"$LOOM" train "$TINY" --run-dir "$WORK/run_eval" --set train.steps=2 --set train.warmup_steps=1 --set data.split=90,10,0 \
  --set eval.steps=1 > "$WORK/run_eval.log" 2>&1 || { cat "$WORK/run_eval.log"; fail "training with evaluation"; }
expect_exit 2 "'$WORK/run_eval' evaluated on validation data (metrics.jsonl has val_loss)" "$LOOM" plan --run "$WORK/run_eval"
"$LOOM" plan --run "$WORK/run" > "$WORK/plan_run.out" && grep -q "predicted traffic equals the counters" "$WORK/plan_run.out" ||
  { cat "$WORK/plan_run.out"; fail "loom plan --run of a run without evaluation should compare equal"; }
expect_exit 2 "outside model.vocab_size = 256" "$LOOM" train "$TINY" --run-dir "$WORK/run2" --set data.path="$WORK/ds" \
  --set model.vocab_size=256

# The MFU line takes its peak from train.peak_tflops; the start line gives the threads per rank.
"$LOOM" train "$TINY" --run-dir "$WORK/mfu" --set train.steps=2 --set train.warmup_steps=1 --set train.threads_per_rank=2 \
  --set train.peak_tflops=0.5 > "$WORK/mfu.log" 2>&1 || { cat "$WORK/mfu.log"; fail "train for the MFU line"; }
grep -q "MFU [0-9.]*% of 0.5 TFLOP/s per device (train.peak_tflops)" "$WORK/mfu.log" || { cat "$WORK/mfu.log"; fail "MFU line"; }
grep -q "| 2 threads per rank |" "$WORK/mfu.log" || { cat "$WORK/mfu.log"; fail "threads per rank on the start line"; }
# A config that is a named pipe with no writer: the read waits, and a launcher's SIGTERM (or a
# Ctrl-C) ends it: the signals loom holds until its input is checked are given back first.
# timeout's SIGKILL (137) would mean the SIGTERM was held. A pipe with a writer (process
# substitution) is read as a file.
mkfifo "$WORK/pipe.yaml"
code=0
timeout -s TERM -k 10 3 "$LOOM" train "$WORK/pipe.yaml" > /dev/null 2>&1 || code=$?
[ "$code" = 124 ] || fail "a config on a named pipe without a writer: exit $code after SIGTERM (137: it was held)"
"$LOOM" topology <(cat "$TINY") --world 2 > /dev/null 2>&1 || fail "a config through process substitution"
echo "cli contract: ok"
