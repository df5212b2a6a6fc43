"""A run's TensorBoard scalars read by TensorBoard itself (EventAccumulator), against metrics.jsonl.

Usage: tensorboard_reader.py RUN_DIR [METRICS_JSONL]. Every number of metrics.jsonl that loom
logs as a scalar (loss, avg_loss, lr, grad norm, validation loss and perplexity, tokens/s, step
time, and the step's split into compute, data, optimizer and checkpoint time) must be in RUN_DIR/tensorboard at the same step with the same value as float32, and every
scalar TensorBoard reads must come from such a number. Exits 1 naming the first difference.
"""
import json
import pathlib
import struct
import sys

from tensorboard.backend.event_processing import event_accumulator

TAGS = {
    "loss": "train/loss",
    "avg_loss": "train/avg_loss",
    "lr": "train/lr",
    "grad_norm": "train/grad_norm",
    "val_loss": "val/loss",
    "val_ppl": "val/ppl",
    "tokens_per_s": "perf/tokens_per_s",
    "step_ms": "perf/step_ms",
    # Where the step went (metrics.jsonl's time_split; its per-collective exposed_ms are not checked here).
    ("time_split", "compute_ms"): "time/compute_ms",
    ("time_split", "data_ms"): "time/data_ms",
    ("time_split", "optimizer_ms"): "time/optimizer_ms",
    ("time_split", "checkpoint_ms"): "time/checkpoint_ms",
}


def value_of(row, key):
    """ROW's number at KEY (a name, or a (record, name) pair for a nested one), or None."""
    if isinstance(key, tuple):
        row = row.get(key[0])
        key = key[1]
    value = row.get(key) if isinstance(row, dict) else None
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def as_float32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def main():
    run = pathlib.Path(sys.argv[1])
    metrics = pathlib.Path(sys.argv[2]) if len(sys.argv) > 2 else run / "metrics.jsonl"
    expected = {tag: {} for tag in TAGS.values()}
    for line in metrics.read_text().splitlines():
        row = json.loads(line)
        for key, tag in TAGS.items():
            if value_of(row, key) is not None and "step" in row:
                expected[tag][row["step"]] = as_float32(value_of(row, key))
    reader = event_accumulator.EventAccumulator(str(run / "tensorboard"), size_guidance={event_accumulator.SCALARS: 0})
    reader.Reload()
    present = set(reader.Tags()["scalars"])
    problems = []
    for tag, by_step in expected.items():
        if not by_step:
            continue
        if tag not in present:
            problems.append(f"{tag}: not in the event files (metrics.jsonl has {len(by_step)} values)")
            continue
        read = {}
        for event in reader.Scalars(tag):
            if event.step in read:
                problems.append(f"{tag}: step {event.step} twice")
            read[event.step] = event.value
        if sorted(read) != sorted(by_step):
            problems.append(f"{tag}: steps {sorted(read)} in TensorBoard, {sorted(by_step)} in metrics.jsonl")
            continue
        for step, value in by_step.items():
            if read[step] != value:
                problems.append(f"{tag} at step {step}: {read[step]} in TensorBoard, {value} in metrics.jsonl")
    for tag in TAGS.values():
        if not expected[tag] and tag in present:
            problems.append(f"{tag}: in TensorBoard but not in metrics.jsonl")
    if problems:
        sys.exit("tensorboard_reader: " + "; ".join(problems[:5]))
    counts = ", ".join(f"{tag} {len(v)}" for tag, v in expected.items() if v)
    print(f"tensorboard_reader: every scalar equal ({counts})")


main()
