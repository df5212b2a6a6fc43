"""How far loom could lead PyTorch eager at each row of the cost-growth table if everything but the
kernels both sides share took no time at all.

    .venv/bin/python bench/kernel_floor.py [--models gpt,llama] [--shapes 6x384s256,...] [--output FILE]

For each row it trains loom and the PyTorch eager script (bench/run.py's model, sizes, optimizer and
threads: cores), profiles the last two steps of each with LibTorch's / torch's profiler, and splits a
step into the kernels both sides call from the same library (the matrix products, aten::mm / addmm /
bmm into MKL, and SDPA's CPU flash kernels) and the rest. `loom/eager` is the ratio of the medians
of the unprofiled steps after warm-up; everything else is per step over the two profiled steps
(their time from the run's own tokens/s, their kernels from the profile), so that a step and its
kernels come from the same steps of the same process.

`ceiling` = eager's step / eager's shared kernels: how far loom could lead eager if its step were
those kernels, run as fast as they ran inside PyTorch, and nothing else. `ceiling (loom's)` divides
by loom's own shared-kernel time instead (the same kernels on the same shapes, timed in loom's
process; the two differ by this machine's run-to-run noise). Where the ceiling is below 1.1, the
issue's target (1.1x eager) cannot be reached by removing loom's own work; it would take faster
matrix products or attention than those PyTorch calls (bench/README.md).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import profile_summary  # noqa: E402
import run as bench  # noqa: E402

GEMM = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_grouped_mm")
ATTENTION = ("aten::_scaled_dot_product_flash_attention_for_cpu",
             "aten::_scaled_dot_product_flash_attention_for_cpu_backward")


def kernel_ms(trace, profiled_steps):
    _, exclusive, _, _ = profile_summary.summarise(trace)
    per_step = lambda names: sum(exclusive[n] for n in names) / 1e3 / profiled_steps  # noqa: E731
    return {"gemm_ms": per_step(GEMM), "attention_ms": per_step(ATTENTION)}


def step_ms(tokens_per_s, tokens_per_step, first, last):
    """The median step of steps first..last (1-based), from tokens/s."""
    return tokens_per_step / statistics.median(tokens_per_s[first - 1:last]) * 1e3


def profiled_ms(tokens_per_s, tokens_per_step):
    """The mean step of the last two (profiled) steps, from tokens/s."""
    return statistics.mean(tokens_per_step / rate for rate in tokens_per_s[-2:]) * 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="gpt,llama")
    parser.add_argument("--shapes", default=",".join(bench.SHAPES))
    parser.add_argument("--steps", type=int, default=10, help="the last two are profiled")
    parser.add_argument("--warmup-steps", type=int, default=3)
    parser.add_argument("--output", default="")
    args = parser.parse_args()
    if args.steps - 2 <= args.warmup_steps:
        sys.exit("kernel_floor: --steps must leave an unprofiled step after the warm-up")
    cores = os.cpu_count() or 1
    first_timed, last_timed = args.warmup_steps + 1, args.steps - 2
    work = tempfile.mkdtemp(prefix="loom-floor.")
    rows = []
    for model in [m for m in args.models.split(",") if m]:
        config, script = bench.MODELS[model]
        for shape in [s for s in args.shapes.split(",") if s]:
            layers, hidden, seq = bench.SHAPES[shape]
            batch = int(bench.read_resolved_config(config)["train.global_batch_size"])
            run_dir = os.path.join(work, f"{model}_{shape}")
            cmd = [bench.LOOM, "train", config, "--run-dir", run_dir, "--set", f"train.steps={args.steps}",
                   "--set", f"train.threads_per_rank={cores}", "--set", f"train.micro_batch_size={batch}",
                   "--set", f"log.profile_step_start={args.steps - 1}", "--set", f"log.profile_step_end={args.steps}"]
            for key, value in bench.shape_overrides(model, layers, hidden, seq).items():
                cmd += ["--set", f"{key}={value}"]
            bench.log(f"{model} {shape}: loom")
            bench.run(cmd)
            records = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
            loom_rates = [r["tokens_per_s"] for r in records if "tokens_per_s" in r]
            resolved = bench.read_resolved_config(os.path.join(run_dir, "config.yaml"))
            trace = os.path.join(work, f"{model}_{shape}_eager.json")
            bench.log(f"{model} {shape}: PyTorch eager")
            output, _ = bench.run([bench.PYTHON, os.path.join(bench.ROOT, "bench", script)]
                                  + bench.reference_args(model, resolved)
                                  + ["--threads", str(cores), "--warmup-steps", str(args.warmup_steps),
                                     "--profile-steps", f"{args.steps - 1}-{args.steps}", "--profile-trace", trace],
                                  env=dict(bench.ENV, OMP_NUM_THREADS=str(cores)))
            eager = bench.last_json(output, "pytorch")
            tokens = batch * seq
            row = {"model": model, "shape": shape, "threads": cores,
                   "loom": dict(step_ms=step_ms(loom_rates, tokens, first_timed, last_timed),
                                profiled_step_ms=profiled_ms(loom_rates, tokens), tokens_per_s=loom_rates,
                                **kernel_ms(os.path.join(run_dir, "profile_rank0.json"), 2)),
                   "eager": dict(step_ms=step_ms(eager["tokens_per_s"], tokens, first_timed, last_timed),
                                 profiled_step_ms=profiled_ms(eager["tokens_per_s"], tokens),
                                 tokens_per_s=eager["tokens_per_s"], **kernel_ms(trace, 2))}
            for side in ("loom", "eager"):
                s = row[side]
                s["shared_ms"] = s["gemm_ms"] + s["attention_ms"]
                s["rest_ms"] = s["profiled_step_ms"] - s["shared_ms"]
            row["loom_over_eager"] = row["eager"]["step_ms"] / row["loom"]["step_ms"]
            row["ceiling"] = row["eager"]["profiled_step_ms"] / row["eager"]["shared_ms"]
            row["ceiling_loom_kernels"] = row["eager"]["profiled_step_ms"] / row["loom"]["shared_ms"]
            rows.append(row)
            bench.log(json.dumps(row))
    print("loom/eager: unprofiled medians; the rest per profiled step, ms: step = gemm + attn + rest")
    print(f"{'shape':11} {'model':5} {'loom/eager':>10} {'eager step':>10} {'gemm':>7} {'attn':>6} {'rest':>6} "
          f"{'loom step':>9} {'gemm':>7} {'attn':>6} {'rest':>6} {'ceiling':>7} {'via loom':>9}")
    for r in rows:
        lo, ea = r["loom"], r["eager"]
        print(f"{r['shape']:11} {r['model']:5} {r['loom_over_eager']:9.2f}x {ea['profiled_step_ms']:10.1f} "
              f"{ea['gemm_ms']:7.1f} {ea['attention_ms']:6.1f} {ea['rest_ms']:6.1f} {lo['profiled_step_ms']:9.1f} "
              f"{lo['gemm_ms']:7.1f} {lo['attention_ms']:6.1f} {lo['rest_ms']:6.1f} {r['ceiling']:6.2f}x "
              f"{r['ceiling_loom_kernels']:8.2f}x")
    if args.output:
        with open(args.output, "w") as f:
            json.dump({"threads": cores, "steps": args.steps, "warmup_steps": args.warmup_steps, "rows": rows},
                      f, indent=1)
    subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
