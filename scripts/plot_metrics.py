#!/usr/bin/env python3
"""Draws a loom run's training loss and validation curves to a PNG.

    .venv/bin/python scripts/plot_metrics.py RUN_DIR [--output FILE] [--log-scale]

Reads RUN_DIR/metrics.jsonl (one JSON object per line, written by `loom train`) and writes
RUN_DIR/metrics.png unless --output names another file. The top panel has the per-step loss
(`loss`), its running mean where the run records one (`avg_loss`) and the validation loss
(`val_loss`) where present; the bottom panel the learning rate. Needs matplotlib, which
`scripts/setup.sh --tests` installs into the project's .venv (or Debian's python3-matplotlib).
"""
import argparse
import json
import math
import os
import sys


def fail(message):
    print(f"plot_metrics: error: {message}", file=sys.stderr)
    sys.exit(2)


def read_records(path):
    records = []
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            line = line.strip()
            if not line:
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                # A run killed mid-write leaves at most its last line cut off; anything else is not ours.
                print(f"plot_metrics: skipping {path}:{number}: not JSON ({error})", file=sys.stderr)
                continue
            if isinstance(record, dict) and isinstance(record.get("step"), int):
                records.append(record)
    return records


def series(records, key):
    """(steps, values) of the records holding a finite number under KEY; a resumed run's repeated
    steps keep their last value, so the curve follows the run that continued."""
    by_step = {}
    for record in records:
        value = record.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            by_step[record["step"]] = float(value)
    steps = sorted(by_step)
    return steps, [by_step[s] for s in steps]


def main():
    parser = argparse.ArgumentParser(description="Plot a loom run's loss and validation curves to a PNG.")
    parser.add_argument("run_dir", help="the run directory (holds metrics.jsonl)")
    parser.add_argument("--output", help="the PNG to write (default RUN_DIR/metrics.png)")
    parser.add_argument("--log-scale", action="store_true", help="logarithmic loss axis")
    args = parser.parse_args()

    metrics = os.path.join(args.run_dir, "metrics.jsonl")
    if not os.path.isfile(metrics):
        fail(f"{metrics} not found: RUN_DIR must be a directory `loom train` wrote")
    records = read_records(metrics)
    loss = series(records, "loss")
    val = series(records, "val_loss")
    if not loss[0] and not val[0]:
        fail(f"{metrics} has no step with a finite loss or val_loss to plot")

    try:
        import matplotlib
    except ImportError:
        fail("matplotlib is not installed (apt-get install python3-matplotlib)")
    matplotlib.use("Agg")  # no display: files only
    import matplotlib.pyplot as plt

    lr = series(records, "lr")
    panels = 2 if lr[0] else 1
    figure, axes = plt.subplots(panels, 1, figsize=(8, 6 if panels == 2 else 4.5), sharex=True, squeeze=False,
                                gridspec_kw={"height_ratios": [3, 1][:panels]})
    top = axes[0][0]
    if loss[0]:
        top.plot(*loss, label="train loss", color="tab:blue", linewidth=1.0, alpha=0.8)
    average = series(records, "avg_loss")
    if average[0]:
        top.plot(*average, label="train loss (running mean)", color="tab:cyan", linewidth=1.5)
    if val[0]:
        top.plot(*val, label="validation loss", color="tab:red", marker="o", markersize=4, linewidth=1.5)
    if args.log_scale:
        top.set_yscale("log")
    top.set_ylabel("loss (nats per token)")
    top.grid(True, alpha=0.3)
    top.legend()
    name = os.path.basename(os.path.normpath(os.path.abspath(args.run_dir)))
    top.set_title(name)
    if panels == 2:
        bottom = axes[1][0]
        bottom.plot(*lr, color="tab:green", linewidth=1.0)
        bottom.set_ylabel("learning rate")
        bottom.ticklabel_format(axis="y", style="sci", scilimits=(-2, 2))
        bottom.grid(True, alpha=0.3)
    axes[-1][0].set_xlabel("step")
    figure.tight_layout()

    output = args.output or os.path.join(args.run_dir, "metrics.png")
    try:
        figure.savefig(output, dpi=100)
    except OSError as error:
        fail(f"cannot write {output}: {error}")
    print(output)


if __name__ == "__main__":
    main()
