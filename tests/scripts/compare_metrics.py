"""Compares two metrics.jsonl files step by step: |a - b| <= rtol * max(1, |b|) for the loss.

Exit 0 when every step agrees (and the step counts match), 1 otherwise, printing the worst step.

--routing-flips (MoE): layouts that sum in another order differ by ~1e-7, and a token whose
router scores for two experts are that close can pick the other one. From that step on the two
runs are different trajectories, so the losses are compared up to it, and the step must look
like such a near-tie: the tokens per expert differ by one choice moved from one expert to
another, in one layer. Anything else (more tokens moved, losses apart before any
routing difference) fails as usual.
"""
import argparse
import json
import sys


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def first_routing_flip(a, b):
    """Index of the first step whose tokens per expert differ; None if none do; -1 (after
    printing why) if the difference is more than one choice moved, in all layers together."""
    for i, (x, y) in enumerate(zip(a, b)):
        ca, cb = x["moe"]["tokens_per_expert"], y["moe"]["tokens_per_expert"]
        if ca == cb:
            continue
        diffs = sorted(p - q for la, lb in zip(ca, cb) for p, q in zip(la, lb) if p != q)
        if len(ca) != len(cb) or diffs != [-1, 1] or sum(la != lb for la, lb in zip(ca, cb)) != 1:
            print(f"routing differs at step {x['step']} beyond one moved choice: {ca} vs {cb}")
            return -1
        return i
    return None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--rtol", type=float, required=True)
    parser.add_argument("--key", default="loss")
    parser.add_argument("--routing-flips", action="store_true")
    args = parser.parse_args()
    a, b = load(args.a), load(args.b)
    if not a or len(a) != len(b):
        print(f"step counts differ: {len(a)} vs {len(b)}")
        return 1
    if args.routing_flips:
        flip = first_routing_flip(a, b)
        if flip == -1:
            return 1
        if flip is not None:
            print(f"routing near-tie at step {a[flip]['step']} (one choice moved); compared the {flip} steps before: ", end="")
            a, b = a[:flip], b[:flip]
            if not a:
                print("none")
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
