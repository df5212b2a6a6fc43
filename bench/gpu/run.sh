#!/usr/bin/env bash
# The GPU half of the benchmark, run on the GPU machine from the repository root
# (after bench/gpu/build.sh): loom and PyTorch eager train the same model in bf16 on
# one GPU, by default the 1.3B GPT (bench/gpu/gpt_1.3b.yaml) beside
# bench/reference_gpt.py; with `--config bench/gpu/llama_1b.yaml` the 1B Llama beside
# bench/reference_llama.py. Prints a table and writes bench/gpu/results.json (and a
# copy under $OUT when the device tool sets it). Other arguments: loom --set
# overrides, e.g. train.micro_batch_size=8 (the PyTorch side reads the shapes from the
# same resolved config).
set -euo pipefail
cd "$(dirname "$0")/../.."
export LD_LIBRARY_PATH=/tmp/loom_deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
out=${OUT:-/tmp/loom_gpu_bench}
mkdir -p "$out"
config=bench/gpu/gpt_1.3b.yaml
if [ "${1:-}" = --config ]; then
  config=$2
  shift 2
fi
sets=()
for s in "$@"; do sets+=(--set "$s"); done
# The GPU's memory in use, sampled every 200 ms while a side runs (both sides alike:
# the CUDA context and the caching allocator's reserve included).
sample_memory() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 > "$1" 2> /dev/null & }
rm -rf /tmp/loom_gpu_run
sample_memory "$out/loom_memory.txt"
sampler=$!
trap 'kill "$sampler" 2> /dev/null' EXIT  # also when a side fails under set -e
"${LOOM:-build-gpu/loom}" train "$config" --run-dir /tmp/loom_gpu_run "${sets[@]}" 2>&1 | tee "$out/loom.log"
kill "$sampler"
# The resolved config loom wrote (sections of "  key: value" lines; no YAML library needed)
# as the reference script's arguments.
mapfile -t reference_args < <(python3 - <<'PY'
c, section, sub = {}, None, None
for line in open("/tmp/loom_gpu_run/config.yaml"):
    if line[:1].isalpha():
        section = line.split(":")[0]
    elif line.startswith("  ") and not line.startswith("   ") and ":" in line:
        key, value = line.strip().split(":", 1)
        c[f"{section}.{key}"] = value.strip().strip('"')
        sub = key
    elif line.startswith("    ") and not line.startswith("     ") and ":" in line:  # model.moe's keys
        key, value = line.strip().split(":", 1)
        c[f"{section}.{sub}.{key}"] = value.strip().strip('"')
llama = c["model.arch"] == "llama"
args = ["bench/reference_llama.py" if llama else "bench/reference_gpt.py"]
for flag, key in [("--layers", "model.num_layers"), ("--hidden", "model.hidden_size"), ("--heads", "model.num_heads"),
                  ("--seq-len", "model.seq_len"), ("--vocab", "model.vocab_size"),
                  ("--global-batch", "train.global_batch_size"), ("--micro-batch", "train.micro_batch_size"),
                  ("--steps", "train.steps"), ("--norm-eps", "model.norm_eps"), ("--lr", "train.lr"),
                  ("--min-lr", "train.min_lr"), ("--lr-warmup-steps", "train.warmup_steps"),
                  ("--weight-decay", "train.weight_decay"), ("--adam-beta1", "train.adam_beta1"),
                  ("--adam-beta2", "train.adam_beta2"), ("--adam-eps", "train.adam_eps"),
                  ("--grad-clip", "train.grad_clip")]:
    args += [flag, c[key]]
if llama:
    for flag, key in [("--kv-heads", "model.num_kv_heads"), ("--ffn", "model.ffn_hidden_size"),
                      ("--rope-theta", "model.rope_theta")]:
        args += [flag, c[key]]
    if c.get("model.tie_embeddings") == "true":
        args.append("--tie-embeddings")
    if int(c.get("model.moe.num_experts", "0")) > 0:
        for flag, key in [("--experts", "model.moe.num_experts"), ("--top-k", "model.moe.top_k"),
                          ("--moe-ffn", "model.moe.moe_intermediate_size"), ("--aux-loss-coeff", "model.moe.aux_loss_coeff")]:
            args += [flag, c[key]]
print("\n".join(args))
PY
)
# PyTorch eager, then torch.compile (SKIP_COMPILE=1 leaves it out), each in its own process.
sides=(pytorch)
[ "${SKIP_COMPILE:-0}" = 1 ] || sides+=(pytorch_compile)
for side in "${sides[@]}"; do
  extra=()
  [ "$side" = pytorch_compile ] && extra=(--compile)
  echo "$side: python3 ${reference_args[*]} --device cuda --precision bf16 --warmup-steps 2 ${extra[*]}"
  sample_memory "$out/${side}_memory.txt"
  sampler=$!
  python3 "${reference_args[@]}" --device cuda --precision bf16 --warmup-steps 2 "${extra[@]}" | tee "$out/$side.json" || true
  kill "$sampler"
done
python3 - "$out" "$config" <<'PY'
import json, statistics, subprocess, sys, datetime, re
out = sys.argv[1]
steps = [json.loads(l) for l in open("/tmp/loom_gpu_run/metrics.jsonl")]
loom = statistics.median([s["tokens_per_s"] for s in steps[2:]])
torch_side = json.loads(open(f"{out}/pytorch.json").read().strip().splitlines()[-1])
mfu = re.search(r"MFU ([0-9.]+)% of ([0-9.]+) TFLOP/s", open(f"{out}/loom.log").read())
smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                     capture_output=True, text=True).stdout.strip()
driver = smi.split(", ")[-1]
result = {"date": datetime.datetime.now().isoformat(timespec="minutes"), "gpu": smi, "driver": driver, "config": sys.argv[2],
          "torch": torch_side.get("torch_version"), "cuda": torch_side.get("cuda_version"), "loom_tokens_per_s": loom,
          "pytorch_tokens_per_s": torch_side["median_tokens_per_s"], "ratio": loom / torch_side["median_tokens_per_s"],
          "loom_mfu_percent": float(mfu.group(1)) if mfu else None, "peak_tflops": float(mfu.group(2)) if mfu else None,
          "pytorch_max_memory_gib": torch_side.get("max_memory_gib")}
try:
    compiled = json.loads(open(f"{out}/pytorch_compile.json").read().strip().splitlines()[-1])
    result["compile_tokens_per_s"] = compiled["median_tokens_per_s"]
    result["ratio_compile"] = loom / compiled["median_tokens_per_s"]
except (OSError, IndexError, KeyError, ValueError):
    result["compile_tokens_per_s"] = result["ratio_compile"] = None
for side in ("loom", "pytorch", "pytorch_compile"):
    try:
        used = [int(x) for x in open(f"{out}/{side}_memory.txt").read().split() if x.isdigit()]
    except OSError:
        used = []
    result[f"{side}_peak_used_gib"] = max(used) / 1024 if used else None
gib = lambda x: "-" if x is None else f"{x:.1f}"
ratio = lambda x: "-" if x is None else f"{x:.2f}x"
print("| GPU | loom tokens/s | eager tokens/s | compile tokens/s | loom / eager | loom / compile | loom MFU "
      "| GPU memory used, loom / eager / compile (GiB) |")
print(f"| {smi} | {loom:.0f} | {result['pytorch_tokens_per_s']:.0f} | {result['compile_tokens_per_s'] or 0:.0f} "
      f"| {ratio(result['ratio'])} | {ratio(result['ratio_compile'])} | {result['loom_mfu_percent']}% "
      f"| {gib(result['loom_peak_used_gib'])} / {gib(result['pytorch_peak_used_gib'])} / {gib(result['pytorch_compile_peak_used_gib'])} |")
name = "results.json" if sys.argv[2].endswith("gpt_1.3b.yaml") else "results_" + sys.argv[2].split("/")[-1].replace(".yaml", ".json")
for path in (f"bench/gpu/{name}", f"{out}/{name}"):
    json.dump(result, open(path, "w"), indent=1)
PY
