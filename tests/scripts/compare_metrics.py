"""Compares two metrics.jsonl files step by step: |a - b| <= rtol * max(1, |b|) for the loss.

Exit 0 when every step agrees (and the step counts match), 1 otherwise, printing the worst step.
"""
import argparse
import json
import sys


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--rtol", type=float, required=True)
    parser.add_argument("--key", default="loss")
    args = parser.parse_args()
    a, b = load(args.a), load(args.b)
    if not a or len(a) != len(b):
        print(f"step counts differ: {len(a)} vs {len(b)}")
        return 1
    worst = max(range(len(a)), key=lambda i: abs(a[i][args.key] - b[i][args.key]) / max(1.0, abs(b[i][args.key])))
    for x, y in zip(a, b):
        if x["step"] != y["step"] or x["consumed_samples"] != y["consumed_samples"]:
            print(f"step or consumed_samples differ at step {x['step']}")
            return 1
        if abs(x[args.key] - y[args.key]) > args.rtol * max(1.0, abs(y[args.key])):
            print(f"{args.key} differs at step {x['step']}: {x[args.key]!r} vs {y[args.key]!r} (rtol {args.rtol})")
            return 1
    d = abs(a[worst][args.key] - b[worst][args.key])
    print(f"{len(a)} steps agree; largest |difference| {d:.3g} at step {a[worst]['step']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
