"""Runs loom beside its peers on this machine and prints a table of ratios
(see bench/README.md). Every side trains the same model (the benchmark's GPT,
and a Llama of its size) for the same steps with the same thread budget per
rank; figures are medians of tokens/s over the steps after warm-up, taken from
rank 0."""
import argparse
import datetime
import json
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
CONFIG = os.path.join(ROOT, "bench", "gpt_bench.yaml")
# Each model: loom's config and the plain PyTorch script that builds the same model.
MODELS = {"gpt": (CONFIG, "reference_gpt.py"), "llama": (os.path.join(ROOT, "bench", "llama_bench.yaml"),
                                                         "reference_llama.py")}
TINY = os.path.join(ROOT, "tests", "configs", "tiny.yaml")
PYTHON = "/usr/bin/python3"  # Debian's, which has torch (and torchrun)
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")


def run(cmd, env=None):
    result = subprocess.run(cmd, env=env or ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        sys.exit(f"bench: {' '.join(cmd)} failed:\n{result.stdout[-3000:]}")
    return result.stdout


def last_json(output, side):
    for line in reversed(output.splitlines()):
        if f'"side": "{side}"' in line:  # torchrun prefixes "[default0]:"
            return json.loads(line[line.index("{"):])
    sys.exit(f"bench: no result line from {side}:\n{output[-2000:]}")


def mpirun(world):
    return ["mpirun", "--oversubscribe", "-np", str(world)] if world > 1 else []


def loom_train(work, name, world, threads, steps, warmup, config=CONFIG, extra=()):
    run_dir = os.path.join(work, name)
    run(mpirun(world) + [LOOM, "train", config, "--run-dir", run_dir, "--set", f"train.steps={steps}",
                         "--set", f"train.threads_per_rank={threads}", *extra])
    records = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    return statistics.median(r["tokens_per_s"] for r in records[warmup:]), run_dir


# What loom's keep_freed_memory() does, as glibc's environment variables.
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 30),
              "MALLOC_TOP_PAD_": str(256 << 20)}


# What loom train sets for OpenBLAS when it has more than one thread (launch/blas_environment.h).
BLAS_ENV = {"OPENBLAS_THREAD_TIMEOUT": "4"}


def pytorch(world, threads, steps, warmup, script="reference_gpt.py"):
    """PyTorch (SCRIPT in bench/) gets the best of three thread splits of the
    same budget, then the best split again with loom's allocator setting, and
    with that and loom's OpenBLAS setting."""
    args = ["--steps", str(steps), "--warmup-steps", str(warmup), "--threads"]
    tried = {}
    splits = [(threads, threads), (1, threads), (threads, 1)]
    tries = [(split, {}, "") for split in splits]
    for i in range(len(splits) + 2):
        if i < len(splits):
            (torch_threads, blas_threads), extra, label = tries[i]
        else:
            best_key = max((k for k in tried if " / loom" not in k), key=tried.get)
            torch_threads, blas_threads = next(sp for sp in splits if f"torch {sp[0]} / openblas {sp[1]}" == best_key)
            extra, label = ((MALLOC_ENV, " / loom's malloc setting") if i == len(splits) else
                            (dict(MALLOC_ENV, **BLAS_ENV), " / loom's malloc and OpenBLAS settings"))
        env = dict(ENV, OPENBLAS_NUM_THREADS=str(blas_threads), OMP_NUM_THREADS=str(torch_threads), **extra)
        script_args = [os.path.join(ROOT, "bench", script), *args, str(torch_threads)]
        if world == 1:
            out = run([PYTHON, *script_args], env)
        else:
            logs = tempfile.mkdtemp(prefix="loom-bench-torchrun.")
            out = run([shutil.which("torchrun") or "torchrun", "--redirects", "1", "--tee", "1", "--log_dir", logs,
                       "--nproc_per_node", str(world), *script_args], env)
        tried[f"torch {torch_threads} / openblas {blas_threads}" + label] = last_json(out, "pytorch")["median_tokens_per_s"]
    return max(tried.values()), tried


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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup-steps", type=int, default=5)
    parser.add_argument("--worlds", default="1,2,4")
    parser.add_argument("--models", default="gpt,llama", help="whose throughput rows to run: gpt, llama or both")
    parser.add_argument("--no-communication", action="store_true", help="skip the traffic and all-reduce sections")
    parser.add_argument("--output", default=os.path.join(ROOT, "bench", "results.json"))
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    work = tempfile.mkdtemp(prefix="loom-bench.")
    results = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "machine": platform.machine(),
               "cores": cores, "config": os.path.relpath(CONFIG, ROOT), "steps": args.steps,
               "warmup_steps": args.warmup_steps, "throughput": [], "traffic": {}, "allreduce": []}
    rows = []
    for model in args.models.split(","):
        config, script = MODELS[model]
        for world in map(int, args.worlds.split(",")):
            threads = max(1, cores // world)
            # The same global batch of 8 sequences, split over the ranks (as the PyTorch side does).
            loom_rate, _ = loom_train(work, f"loom_{model}_w{world}", world, threads, args.steps, args.warmup_steps,
                                      config=config, extra=["--set", f"train.micro_batch_size={8 // world}"])
            torch_rate, tried = pytorch(world, threads, args.steps, args.warmup_steps, script)
            entry = {"model": model, "world": world, "threads_per_rank": threads, "loom_tokens_per_s": loom_rate,
                     "pytorch_tokens_per_s": torch_rate, "ratio": loom_rate / torch_rate,
                     "pytorch_thread_splits": tried}
            name = "" if model == "gpt" else " (Llama)"
            rows.append((f"loom vs PyTorch{' DDP' if world > 1 else ''}{name}, {world} rank{'s' if world > 1 else ''}",
                         loom_rate, torch_rate, loom_rate / torch_rate))
            if world == 1 and model == "gpt":
                minimal_args = [MINIMAL, "--steps", str(args.steps), "--warmup-steps", str(args.warmup_steps),
                                "--threads", str(threads)]
                minimal = last_json(run(minimal_args), "minimal-libtorch")["median_tokens_per_s"]
                # The same loop on loom's CPU kernels and OpenBLAS setting: what is left is the framework.
                kernels = last_json(run(minimal_args + ["--loom-kernels", "1"], dict(ENV, **BLAS_ENV)),
                                    "minimal-libtorch")["median_tokens_per_s"]
                entry["minimal_libtorch_tokens_per_s"] = minimal
                entry["minimal_loom_kernels_tokens_per_s"] = kernels
                entry["framework_overhead"] = 1.0 - loom_rate / kernels
                rows.append(("loom vs minimal LibTorch loop, 1 rank", loom_rate, minimal, loom_rate / minimal))
                rows.append(("loom vs that loop on loom's kernels, 1 rank", loom_rate, kernels, loom_rate / kernels))
            results["throughput"].append(entry)

    if not args.no_communication:
        layouts = {"dp2": (2, []), "dp4": (4, []), "tp2": (2, ["--set", "parallel.tp=2"]),
                   "tp2_sp": (2, ["--set", "parallel.tp=2", "--set", "parallel.sequence_parallel=true"]),
                   "pp2_dp2": (4, ["--set", "parallel.pp=2", "--set", "train.global_batch_size=16"]),
                   "tp2_pp2_dp2": (8, ["--set", "parallel.tp=2", "--set", "parallel.pp=2", "--set", "train.global_batch_size=16"]),
                   "zero1_dp4": (4, ["--set", "parallel.zero_stage=1"]), "zero2_dp4": (4, ["--set", "parallel.zero_stage=2"]),
                   "zero3_dp4": (4, ["--set", "parallel.zero_stage=3"])}
        for name, (world, extra) in layouts.items():
            results["traffic"][name] = traffic_ratio(work, f"traffic_{name}", world, extra)
        for world in (2, 4):
            results["allreduce"].append(last_json(run(mpirun(world) + [ALLREDUCE]), "allreduce"))
    shutil.rmtree(work, ignore_errors=True)

    print(f"\nloom benchmark, {results['date']}, {cores} cores, {args.steps} steps (median after {args.warmup_steps})")
    print(f"{'':52} {'loom tok/s':>11} {'peer tok/s':>11} {'ratio':>7}")
    for label, a, b, r in rows:
        print(f"{label:52} {a:11.0f} {b:11.0f} {r:7.2f}x")
    if not args.no_communication:
        print("\ncommunication, bytes counted / the cost model's formula, per group (tiny GPT, 5 steps):")
        for name, groups in results["traffic"].items():
            print(f"  {name:12} " + "  ".join(f"{g} {r:.4f}x" for g, r in sorted(groups.items())))
        print("\nall-reduce through loom's communicator (gloo), fitted time = alpha + beta * bytes:")
        for a in results["allreduce"]:
            print(f"  {a['world']} ranks: alpha {a['alpha_us']:.0f} us, 1/beta {a['algbw_GBps']:.2f} GB/s, "
                  f"bus bandwidth at 16 MiB {a['busbw_GBps']:.2f} GB/s")
    with open(args.output, "w") as f:
        json.dump(results, f, indent=1)
    print(f"\nwritten to {args.output}")


if __name__ == "__main__":
    main()
