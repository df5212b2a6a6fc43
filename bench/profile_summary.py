"""Summarises a Chrome trace of LibTorch's profiler (loom's RUN_DIR/profile_rank0.json, written under
log.profile_step_start/end): the total of the top-level events, and per op name its exclusive and
inclusive time and count, largest exclusive first.

    python3 bench/profile_summary.py RUN_DIR/profile_rank0.json [TOP]
"""
import collections
import json
import sys


def summarise(path):
    """(total of the top-level events in us, exclusive us per op name, inclusive us, count)."""
    data = json.load(open(path))
    events = data["traceEvents"] if isinstance(data, dict) else data
    events = [e for e in events if e.get("ph") == "X" and "dur" in e]
    by_thread = collections.defaultdict(list)
    for e in events:
        by_thread[(e.get("pid"), e.get("tid"))].append(e)
    exclusive, inclusive, count = collections.Counter(), collections.Counter(), collections.Counter()
    total = 0
    for thread_events in by_thread.values():
        thread_events.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in thread_events:
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
                stack.pop()
            if stack:
                stack[-1]["_children"] = stack[-1].get("_children", 0) + e["dur"]
            elif not e["name"].startswith("PyTorch Profiler"):
                total += e["dur"]
            stack.append(e)
        for e in thread_events:
            exclusive[e["name"]] += e["dur"] - e.get("_children", 0)
            inclusive[e["name"]] += e["dur"]
            count[e["name"]] += 1
    return total, exclusive, inclusive, count


def main(path, top):
    total, exclusive, inclusive, count = summarise(path)
    print(f"top-level events: {total / 1e3:.1f} ms")
    for name, t in exclusive.most_common(top):
        if name.startswith("PyTorch Profiler"):
            continue
        print(f"{t / 1e3:9.1f} ms exclusive {inclusive[name] / 1e3:9.1f} ms inclusive {count[name]:6d}x  {name[:90]}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 30)
