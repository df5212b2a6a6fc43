"""Runs loom beside PyTorch 2.x (the torch wheel in .venv/, whose LibTorch loom links) on this
machine and prints a table (see bench/README.md).

Each row trains one model at one shape on one number of ranks, three times: `loom train`
(under mpirun beyond one rank), the same model in PyTorch eager (attention through
scaled_dot_product_attention, the fused AdamW; DistributedDataParallel on gloo under torchrun
beyond one rank), and that script again with torch.compile. The PyTorch side takes every size,
the optimizer, its schedule and clipping from the config loom resolved for the row
(RUN_DIR/config.yaml), and the row checks that both sides have the same number of parameters.
Throughput is the median of tokens/s over the steps after warm-up, read from rank 0; peak memory
is each process's peak resident set size (the largest over the ranks)."""
import argparse
import datetime
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOOM = os.path.join(ROOT, "build", "loom")
MINIMAL = os.path.join(ROOT, "build", "bench", "loom_bench_minimal")
ALLREDUCE = os.path.join(ROOT, "build", "bench", "loom_bench_allreduce")
# The torch wheel loom builds against (scripts/setup.sh), and its torchrun.
PYTHON = os.path.join(ROOT, ".venv", "bin", "python")
TORCHRUN = os.path.join(ROOT, ".venv", "bin", "torchrun")
# Each model: loom's config and the plain PyTorch script that builds the same model.
MODELS = {"gpt": (os.path.join(ROOT, "bench", "gpt_bench.yaml"), "reference_gpt.py"),
          "llama": (os.path.join(ROOT, "bench", "llama_bench.yaml"), "reference_llama.py")}
# The cost-growth table: LAYERSxHIDDENsSEQ -> (layers, hidden, seq). Heads are hidden / 64.
SHAPES = {"4x256s128": (4, 256, 128), "6x384s256": (6, 384, 256), "6x384s1024": (6, 384, 1024),
          "6x768s256": (6, 768, 256), "12x768s512": (12, 768, 512)}
TINY = os.path.join(ROOT, "tests", "configs", "tiny.yaml")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")
# What loom's keep_freed_memory() does (core/cpu_memory.h), as glibc's environment variables:
# --torch-malloc loom gives it to the PyTorch side too.
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 30),
              "MALLOC_TOP_PAD_": str(256 << 20)}
MB = 1 << 20


def log(message):
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def run(cmd, env=None):
    """Runs cmd to the end; returns its output and the peak RSS in bytes of the largest process
    of its tree that it waited for (wait4's ru_maxrss: for mpirun, its largest rank)."""
    with tempfile.TemporaryFile(mode="w+") as out:
        process = subprocess.Popen(cmd, env=env or ENV, stdout=out, stderr=subprocess.STDOUT, text=True)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        output = out.read()
    if process.returncode != 0:
        sys.exit(f"bench: {' '.join(cmd)} failed ({process.returncode}):\n{output[-3000:]}")
    return output, usage.ru_maxrss * 1024  # Linux: KiB


def last_json(output, side):
    for line in reversed(output.splitlines()):
        if f'"side": "{side}"' in line:  # torchrun may prefix "[default0]:"
            return json.loads(line[line.index("{"):])
    sys.exit(f"bench: no result line from {side}:\n{output[-2000:]}")


def mpirun(world):
    return ["mpirun", "--oversubscribe", "-np", str(world)] if world > 1 else []


def read_resolved_config(path):
    """loom's resolved config.yaml as {"section.key": "value"} (two levels of "key: value" lines;
    no YAML library needed)."""
    config, section, subsection = {}, None, None
    for line in open(path):
        if line.lstrip().startswith("#") or ":" not in line:
            continue
        key, value = line.strip().split(":", 1)
        value = value.strip().strip('"')
        if line[:1].isalpha():
            section = key
        elif line.startswith("    ") and not line.startswith("     "):
            config[f"{section}.{subsection}.{key}"] = value
        elif line.startswith("  ") and not line.startswith("   "):
            subsection = key
            config[f"{section}.{key}"] = value
    return config


def shape_overrides(model, layers, hidden, seq):
    """loom --set overrides for one shape: heads = hidden / 64; the Llama's kv heads heads / 2 and
    SwiGLU width 8 hidden / 3 rounded up to a multiple of 64."""
    heads = max(1, hidden // 64)
    sets = {"model.num_layers": layers, "model.hidden_size": hidden, "model.num_heads": heads, "model.seq_len": seq}
    if model == "llama":
        sets["model.num_kv_heads"] = max(1, heads // 2)
        sets["model.ffn_hidden_size"] = 64 * math.ceil(8 * hidden / 3 / 64)
    return sets


# What each reference script builds; a resolved config that differs is refused, not benchmarked.
ARCHITECTURE = {
    "gpt": {"model.norm": "layernorm", "model.activation": "gelu", "model.position": "learned",
            "model.bias": "true", "model.qkv_bias": "true", "model.tie_embeddings": "true"},
    "llama": {"model.norm": "rmsnorm", "model.activation": "swiglu", "model.position": "rope",
              "model.bias": "false", "model.qkv_bias": "false"},
}


def reference_args(model, config):
    """The reference script's arguments for loom's resolved config (the same sizes, optimizer,
    schedule, clipping and batch), after checking that the script builds that architecture."""
    expected = dict(ARCHITECTURE[model], **{"model.dropout": "0", "train.precision": "fp32",
                                            "parallel.tp": "1", "parallel.pp": "1", "parallel.cp": "1",
                                            "parallel.zero_stage": "0", "train.recompute": "none",
                                            "model.moe.num_experts": "0", "model.rope_scaling.type": "none"})
    wrong = {k: (config.get(k), v) for k, v in expected.items() if k in config and config[k] != v}
    if wrong:
        sys.exit(f"bench: the {model} reference script does not build this config: "
                 + ", ".join(f"{k} is {got}, the script has {want}" for k, (got, want) in wrong.items()))
    args = []
    for flag, key in [("--layers", "model.num_layers"), ("--hidden", "model.hidden_size"),
                      ("--heads", "model.num_heads"), ("--seq-len", "model.seq_len"),
                      ("--vocab", "model.vocab_size"), ("--norm-eps", "model.norm_eps"),
                      ("--global-batch", "train.global_batch_size"), ("--micro-batch", "train.micro_batch_size"),
                      ("--steps", "train.steps"), ("--lr", "train.lr"), ("--min-lr", "train.min_lr"),
                      ("--lr-warmup-steps", "train.warmup_steps"), ("--weight-decay", "train.weight_decay"),
                      ("--adam-beta1", "train.adam_beta1"), ("--adam-beta2", "train.adam_beta2"),
                      ("--adam-eps", "train.adam_eps"), ("--grad-clip", "train.grad_clip")]:
        args += [flag, config[key]]
    if model == "llama":
        kv = config["model.num_kv_heads"]
        args += ["--kv-heads", kv if kv != "0" else config["model.num_heads"], "--ffn", config["model.ffn_hidden_size"],
                 "--rope-theta", config["model.rope_theta"]]
        if config.get("model.tie_embeddings") == "true":
            args.append("--tie-embeddings")
    return args


def loom_train(work, name, world, threads, steps, warmup, config, sets):
    run_dir = os.path.join(work, name)
    cmd = mpirun(world) + [LOOM, "train", config, "--run-dir", run_dir, "--set", f"train.steps={steps}",
                           "--set", f"train.threads_per_rank={threads}"]
    for key, value in sets.items():
        cmd += ["--set", f"{key}={value}"]
    _, peak_rss = run(cmd)
    records = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    steps_done = [r for r in records if "tokens_per_s" in r]
    memory = next((r["memory"] for r in records if "memory" in r), [])
    return {"tokens_per_s": [r["tokens_per_s"] for r in steps_done],
            "median_tokens_per_s": statistics.median(r["tokens_per_s"] for r in steps_done[warmup:] or steps_done),
            "losses": [r["loss"] for r in steps_done], "peak_rss_bytes": peak_rss,
            # loom's own memory report (first step): model state and the activation peak per rank,
            # counted by its allocator wrapper; not an RSS (no code, no interpreter, no allocator slack).
            "memory_report": memory,
            "command": " ".join(cmd)}, read_resolved_config(os.path.join(run_dir, "config.yaml"))


def pytorch(script, script_args, world, compile_, warmup, thread_tries, malloc_tries):
    """The reference script with each thread count and allocator setting asked for; the best
    tokens/s is the row's, every try is kept."""
    tries = []
    for threads in thread_tries:
        for malloc in malloc_tries:
            env = dict(ENV, OMP_NUM_THREADS=str(threads), **(MALLOC_ENV if malloc == "loom" else {}))
            args = [os.path.join(ROOT, "bench", script), *script_args, "--warmup-steps", str(warmup),
                    "--threads", str(threads)] + (["--compile"] if compile_ else [])
            cmd = [PYTHON, *args] if world == 1 else [TORCHRUN, "--standalone", "--nproc_per_node", str(world), *args]
            output, _ = run(cmd, env)
            result = last_json(output, "pytorch")
            result.update(malloc=malloc, command=" ".join(cmd))
            if compile_ and result.get("graphs_compiled_after_warmup", 0) > 0:
                log(f"warning: torch.compile made {result['graphs_compiled_after_warmup']} graph(s) after the "
                    f"warm-up steps: compilation inside the timed steps ({' '.join(cmd)})")
            tries.append(result)
    best = max(tries, key=lambda r: r["median_tokens_per_s"])
    return best, tries


def traffic_ratio(work, name, world, extra):
    """Bytes counted in a run against the cost model's formula, per group."""
    run_dir = os.path.join(work, name)
    run(mpirun(world) + [LOOM, "train", TINY, "--run-dir", run_dir, "--set", "train.steps=5", *extra])
    run([LOOM, "plan", "--run", run_dir])
    plan = json.load(open(os.path.join(run_dir, "plan_vs_run.json")))
    groups = {}
    for rank in plan["ranks"]:
        for e in rank["entries"]:
            g = groups.setdefault(e["group"], [0, 0])
            g[0] += e["measured_bytes"]
            g[1] += e["predicted_bytes"]
    return {g: (m / p if p else float("nan")) for g, (m, p) in groups.items()}


def int_list(text):
    return [int(x) for x in text.split(",") if x]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup-steps", type=int, default=5,
                        help="steps left out of the median (torch.compile compiles in the first)")
    parser.add_argument("--worlds", default="1,2,4", help="ranks per row: 1 is one process, more is DDP / mpirun")
    parser.add_argument("--models", default="gpt,llama", help="gpt, llama or both")
    parser.add_argument("--shapes", default=",".join(SHAPES),
                        help=f"LAYERSxHIDDENsSEQ, comma-separated, of {', '.join(SHAPES)} (default: all)")
    parser.add_argument("--torch-threads", default="",
                        help="torch.set_num_threads values to try on the PyTorch side, best kept (e.g. 1,2); "
                             "default: cores / ranks, what loom's ranks get")
    parser.add_argument("--torch-malloc", default="default",
                        help="glibc settings to try on the PyTorch side, best kept: default, loom (loom's "
                             "keep_freed_memory() as MALLOC_* variables) or default,loom")
    parser.add_argument("--minimal-loop", action="store_true",
                        help="also the minimal LibTorch loop (GPT, one rank, each shape), plain and on loom's kernels")
    parser.add_argument("--no-communication", action="store_true", help="skip the traffic and all-reduce sections")
    parser.add_argument("--output", default=os.path.join(ROOT, "bench", "results.json"))
    args = parser.parse_args()
    shapes = [s for s in args.shapes.split(",") if s]
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown:
        sys.exit(f"bench: unknown shape {', '.join(unknown)}; the shapes are {', '.join(SHAPES)}")
    models = [m for m in args.models.split(",") if m]
    if any(m not in MODELS for m in models):
        sys.exit(f"bench: --models takes {', '.join(MODELS)}")
    if args.warmup_steps < 1 or args.warmup_steps >= args.steps:
        sys.exit("bench: --warmup-steps must be at least 1 (torch.compile compiles in the first step) "
                 "and below --steps")
    malloc_tries = [m for m in args.torch_malloc.split(",") if m]
    if any(m not in ("default", "loom") for m in malloc_tries):
        sys.exit("bench: --torch-malloc takes default, loom or default,loom")
    if args.minimal_loop and not os.path.exists(MINIMAL):
        sys.exit(f"bench: no {os.path.relpath(MINIMAL, ROOT)} (cmake --build build --target loom_bench_minimal)")
    cores = os.cpu_count() or 1
    work = tempfile.mkdtemp(prefix="loom-bench.")
    # What the two runtimes hold before any model: loom's binary (`loom --version`) and the
    # interpreter with torch imported (each PyTorch run reports its own, rss_at_start_bytes).
    _, loom_baseline = run([LOOM, "--version"])
    results = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "machine": platform.machine(),
               "processor": platform.processor(), "cores": cores, "steps": args.steps,
               "warmup_steps": args.warmup_steps,
               "memory_measure": "peak RSS: wait4's ru_maxrss of loom's process (mpirun's largest rank), "
                                 "getrusage(RUSAGE_SELF).ru_maxrss of each PyTorch process (largest rank)",
               "loom_version_peak_rss_bytes": loom_baseline, "rows": [], "minimal_loop": [],
               "traffic": {}, "allreduce": []}
    rows = []
    for model in models:
        config, script = MODELS[model]
        for shape in shapes:
            layers, hidden, seq = SHAPES[shape]
            for world in int_list(args.worlds):
                threads = max(1, cores // world)
                thread_tries = int_list(args.torch_threads) or [threads]
                # The config's global batch, split over the ranks in one micro-batch each (as the
                # PyTorch side does), on the CPU.
                batch = int(read_resolved_config(config)["train.global_batch_size"])
                if batch % world:
                    sys.exit(f"bench: the global batch {batch} does not split over {world} ranks")
                sets = dict(shape_overrides(model, layers, hidden, seq), **{
                    "train.micro_batch_size": batch // world, "train.device": "cpu"})
                log(f"{model} {shape}, {world} rank(s): loom")
                loom, resolved = loom_train(work, f"loom_{model}_{shape}_w{world}", world, threads, args.steps,
                                            args.warmup_steps, config, sets)
                script_args = reference_args(model, resolved)
                log(f"{model} {shape}, {world} rank(s): PyTorch eager")
                eager, eager_tries = pytorch(script, script_args, world, False, args.warmup_steps, thread_tries,
                                             malloc_tries)
                log(f"{model} {shape}, {world} rank(s): PyTorch torch.compile")
                compiled, compiled_tries = pytorch(script, script_args, world, True, args.warmup_steps, thread_tries,
                                                   malloc_tries)
                # The same model: as many parameters on both sides (loom's fp32 parameter bytes / 4).
                loom_params = loom["memory_report"][0]["params_bytes"] // 4 if loom["memory_report"] else None
                same_size = loom_params == eager["parameters"] == compiled["parameters"]
                if not same_size:
                    log(f"warning: {model} {shape}: loom has {loom_params} parameters, PyTorch {eager['parameters']}")
                entry = {"model": model, "shape": shape, "world": world, "threads_per_rank": threads,
                         "loom_overrides": sets, "parameters": {"loom": loom_params, "pytorch": eager["parameters"],
                                                                "same": same_size},
                         "ln_vocab": math.log(int(resolved["model.vocab_size"])),
                         "loom": loom, "eager": eager, "compile": compiled,
                         "eager_tries": eager_tries, "compile_tries": compiled_tries,
                         "loom_over_eager": loom["median_tokens_per_s"] / eager["median_tokens_per_s"],
                         "loom_over_compile": loom["median_tokens_per_s"] / compiled["median_tokens_per_s"]}
                results["rows"].append(entry)
                rows.append(entry)
            if args.minimal_loop and model == "gpt":
                threads = cores
                minimal_args = [MINIMAL, "--steps", str(args.steps), "--warmup-steps", str(args.warmup_steps),
                                "--threads", str(threads), "--layers", str(layers), "--hidden", str(hidden),
                                "--heads", str(max(1, hidden // 64)), "--seq-len", str(seq)]
                log(f"{model} {shape}: minimal LibTorch loop")
                plain = last_json(run(minimal_args)[0], "minimal-libtorch")["median_tokens_per_s"]
                kernels = last_json(run(minimal_args + ["--loom-kernels", "1"])[0],
                                    "minimal-libtorch")["median_tokens_per_s"]
                loom_rate = next(r["loom"]["median_tokens_per_s"] for r in rows
                                 if r["model"] == model and r["shape"] == shape and r["world"] == 1) \
                    if 1 in int_list(args.worlds) else None
                results["minimal_loop"].append({"shape": shape, "minimal_libtorch_tokens_per_s": plain,
                                                "minimal_loom_kernels_tokens_per_s": kernels,
                                                "loom_tokens_per_s": loom_rate})

    if not args.no_communication:
        layouts = {"dp2": (2, []), "dp4": (4, []), "tp2": (2, ["--set", "parallel.tp=2"]),
                   "tp2_sp": (2, ["--set", "parallel.tp=2", "--set", "parallel.sequence_parallel=true"]),
                   "pp2_dp2": (4, ["--set", "parallel.pp=2", "--set", "train.global_batch_size=16"]),
                   "tp2_pp2_dp2": (8, ["--set", "parallel.tp=2", "--set", "parallel.pp=2", "--set", "train.global_batch_size=16"]),
                   "zero1_dp4": (4, ["--set", "parallel.zero_stage=1"]), "zero2_dp4": (4, ["--set", "parallel.zero_stage=2"]),
                   "zero3_dp4": (4, ["--set", "parallel.zero_stage=3"])}
        for name, (world, extra) in layouts.items():
            log(f"traffic {name}")
            results["traffic"][name] = traffic_ratio(work, f"traffic_{name}", world, extra)
        if os.path.exists(ALLREDUCE):
            for world in (2, 4):
                results["allreduce"].append(last_json(run(mpirun(world) + [ALLREDUCE])[0], "allreduce"))
        else:
            log(f"no {os.path.relpath(ALLREDUCE, ROOT)} (build it: cmake --build build --target loom_bench_allreduce)")
    shutil.rmtree(work, ignore_errors=True)

    if rows:
        print(f"\nloom vs PyTorch {rows[0]['eager']['torch_version']}, {results['date']}, {cores} cores, "
              f"{args.steps} steps (median of the {args.steps - args.warmup_steps} after {args.warmup_steps} warm-up)")
    header = (f"{'shape':11} {'model':5} {'ranks':>5} {'loom tok/s':>10} {'eager tok/s':>11} {'compile tok/s':>13} "
              f"{'loom/eager':>10} {'loom/compile':>12} {'loom peak MB':>12} {'eager peak MB':>13} "
              f"{'compile peak MB':>15}")
    if rows:
        print(header)
    for r in rows:
        lo, ea, co = r["loom"], r["eager"], r["compile"]
        print(f"{r['shape']:11} {r['model']:5} {r['world']:5} {lo['median_tokens_per_s']:10.0f} "
              f"{ea['median_tokens_per_s']:11.0f} {co['median_tokens_per_s']:13.0f} {r['loom_over_eager']:9.2f}x "
              f"{r['loom_over_compile']:11.2f}x {lo['peak_rss_bytes'] / MB:12.0f} {ea['peak_rss_bytes'] / MB:13.0f} "
              f"{co['peak_rss_bytes'] / MB:15.0f}")
    if rows:
        print(f"\npeak MB: peak RSS of the process (ranks > 1: the largest rank); before any model loom's binary "
              f"holds {loom_baseline / MB:.0f} MB, the interpreter with torch imported "
              f"{max(r['eager']['rss_at_start_bytes'] for r in rows) / MB:.0f} MB")
        print("step-1 loss (ln vocab for an untrained model on random tokens; loom's synthetic corpus is not uniform):")
        for r in rows:
            first = [r[side]["losses"][0] for side in ("loom", "eager", "compile")]
            print(f"  {r['shape']:11} {r['model']:5} {r['world']} rank(s): loom {first[0]:.4f}  eager {first[1]:.4f}  "
                  f"compile {first[2]:.4f}  ln(vocab) {r['ln_vocab']:.4f}  parameters "
                  f"{'the same' if r['parameters']['same'] else 'DIFFER'} ({r['parameters']['loom']})")
        compiles = [r["compile"].get("first_step_s") for r in rows]
        print("torch.compile's first step (compilation, not timed): "
              + ", ".join(f"{r['shape']} {r['model']} {r['world']}: {s:.0f} s" for r, s in zip(rows, compiles)))
    if results["minimal_loop"]:
        print("\nminimal LibTorch loop (GPT, one rank):")
        for m in results["minimal_loop"]:
            print(f"  {m['shape']:11} plain {m['minimal_libtorch_tokens_per_s']:.0f} tok/s, on loom's kernels "
                  f"{m['minimal_loom_kernels_tokens_per_s']:.0f} tok/s"
                  + (f", loom {m['loom_tokens_per_s']:.0f} tok/s" if m["loom_tokens_per_s"] else ""))
    if not args.no_communication:
        print("\ncommunication, bytes counted / the cost model's formula, per group (tiny GPT, 5 steps):")
        for name, groups in results["traffic"].items():
            print(f"  {name:12} " + "  ".join(f"{g} {r:.4f}x" for g, r in sorted(groups.items())))
        if results["allreduce"]:
            print("\nall-reduce through loom's communicator (gloo), fitted time = alpha + beta * bytes:")
        for a in results["allreduce"]:
            print(f"  {a['world']} ranks: alpha {a['alpha_us']:.0f} us, 1/beta {a['algbw_GBps']:.2f} GB/s, "
                  f"bus bandwidth at 16 MiB {a['busbw_GBps']:.2f} GB/s")
    with open(args.output, "w") as f:
        json.dump(results, f, indent=1)
    print(f"\nwritten to {args.output}")


if __name__ == "__main__":
    main()
