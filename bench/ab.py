"""Two builds of loom side by side: `python3 bench/ab.py OLD_LOOM NEW_LOOM [--rounds 3]`.

Trains bench/gpt_bench.yaml with each binary in turn (old, new, old, new, ...), at one rank with
every core's threads and at two ranks under mpirun, and prints each binary's median tokens/s
(median of the steps after warm-up, then the median over rounds) and new / old. Alternating the
two cancels most of this shared machine's drift; the spread between rounds is printed too.
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "bench", "gpt_bench.yaml")
GLOBAL_BATCH = 8  # bench/gpt_bench.yaml's train.global_batch_size


def tokens_per_s(loom, world, steps, warmup, work):
    run_dir = tempfile.mkdtemp(dir=work)
    cmd = [loom, "train", CONFIG, "--run-dir", run_dir, "--set", f"train.steps={steps}",
           "--set", f"train.threads_per_rank={max(1, os.cpu_count() // world)}",
           # The same global batch split over the ranks (bench/run.py does the same).
           "--set", f"train.micro_batch_size={GLOBAL_BATCH // world}"]
    if world > 1:
        cmd = ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", str(world)] + cmd
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    records = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    return statistics.median(r["tokens_per_s"] for r in records[warmup:])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup-steps", type=int, default=5)
    parser.add_argument("--worlds", default="1,2")
    args = parser.parse_args()
    work = tempfile.mkdtemp()
    print(f"{'world':>5} {'old tok/s':>10} {'new tok/s':>10} {'new / old':>9}   rounds (old | new)", flush=True)
    for world in map(int, args.worlds.split(",")):
        old, new = [], []
        for _ in range(args.rounds):
            old.append(tokens_per_s(args.old, world, args.steps, args.warmup_steps, work))
            new.append(tokens_per_s(args.new, world, args.steps, args.warmup_steps, work))
        o, n = statistics.median(old), statistics.median(new)
        print(f"{world:>5} {o:>10.0f} {n:>10.0f} {n / o:>8.3f}x   {' '.join(f'{x:.0f}' for x in old)} | "
              f"{' '.join(f'{x:.0f}' for x in new)}", flush=True)


if __name__ == "__main__":
    main()
