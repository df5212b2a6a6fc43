"""The end-to-end scripts' checks on what loom wrote: one subcommand per check.

    python3 tests/scripts/checks.py SUBCOMMAND ARGS...   (--help lists them; SUBCOMMAND --help its arguments)

RUN is a run directory (metrics.jsonl, comm_rankR.json, ...). A check that holds prints one line
saying what it measured and exits 0; one that does not exits 1 naming the subcommand and what
differed. Only safetensors-close and the hf- checks need torch (Debian's /usr/bin/python3).

The tolerances are the tests' own: a subcommand takes them as arguments, so each script says what
it holds its runs to.
"""
import argparse
import json
import math
import os
import struct
import sys


def metrics(run):
    """The records of RUN/metrics.jsonl, in order."""
    with open(os.path.join(run, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def first_memory(run):
    """The memory report (one entry per rank) of RUN's first step."""
    with open(os.path.join(run, "metrics.jsonl")) as f:
        return json.loads(f.readline())["memory"]


def relative(a, b):
    return abs(a - b) / max(1, abs(b))


# ---- losses and other per-step values --------------------------------------------------------


def load_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def first_routing_flip(a, b, rounds=False):
    """Index of the first step whose tokens per expert differ; None if none do; -1 (after
    printing why) if the difference is more than one choice moved, in all layers together.
    ROUNDS: the layout rounds by design (gradients sent in bf16), so from step 2 on any number of
    choices may move (its weights are the reference's within that rounding)."""
    for i, (x, y) in enumerate(zip(a, b)):
        ca, cb = x["moe"]["tokens_per_expert"], y["moe"]["tokens_per_expert"]
        if ca == cb:
            continue
        diffs = sorted(p - q for la, lb in zip(ca, cb) for p, q in zip(la, lb) if p != q)
        one_moved = len(ca) == len(cb) and diffs == [-1, 1] and sum(la != lb for la, lb in zip(ca, cb)) == 1
        if rounds and i >= 1 and len(ca) == len(cb) and not one_moved:
            print(f"routing apart at step {x['step']} (the layout rounds by design: choices moved); ", end="")
            return i
        if not one_moved:
            print(f"routing differs at step {x['step']} beyond one moved choice: {ca} vs {cb}")
            return -1
        print(f"routing near-tie at step {x['step']} (one choice moved); ", end="")
        return i
    return None


def compare_metrics(args):
    """Two metrics.jsonl files, step by step: the same steps and consumed samples, and
    |a - b| <= rtol * max(1, |b|) for KEY (the loss). Prints the worst step.

    --routing-flips (MoE): layouts that sum in another order differ by ~1e-7, and a token whose
    router scores for two experts are that close can pick the other one. From that step on the
    two runs are different trajectories, so the losses are compared up to it, and the step must
    look like such a near-tie: the tokens per expert differ by one choice moved from one expert
    to another, in one layer. Anything else (more tokens moved, losses apart before any routing
    difference) fails as usual."""
    a, b = load_jsonl(args.a), load_jsonl(args.b)
    if not a or len(a) != len(b):
        print(f"step counts differ: {len(a)} vs {len(b)}")
        return 1
    if args.routing_flips:
        flip = first_routing_flip(a, b, args.rounds)
        if flip == -1:
            return 1
        if flip is not None:
            print(f"compared the {flip} steps before: ", end="")
            a, b = a[:flip], b[:flip]
            if not a:
                print("none")
                return 1
    key = args.key
    worst = max(range(len(a)), key=lambda i: abs(a[i][key] - b[i][key]) / max(1.0, abs(b[i][key])))
    for x, y in zip(a, b):
        if x["step"] != y["step"] or x["consumed_samples"] != y["consumed_samples"]:
            print(f"step or consumed_samples differ at step {x['step']}")
            return 1
        if abs(x[key] - y[key]) > args.rtol * max(1.0, abs(y[key])):
            print(f"{key} differs at step {x['step']}: {x[key]!r} vs {y[key]!r} (rtol {args.rtol})")
            return 1
    d = abs(a[worst][key] - b[worst][key])
    # The bar is relative (to max(1, |value|)): the figure it is held to, beside the absolute one.
    r = d / max(1.0, abs(b[worst][key]))
    print(f"{len(a)} steps agree; largest |difference| {d:.3g} at step {a[worst]['step']} "
          f"({r:.3g} of max(1, |{key}|), bar {args.rtol:g})")
    return 0


def steps_agree(args):
    """Run A's KEY (the loss) at its steps from FIRST on equals run B's at the same steps within
    rtol * max(1, |b|); B has every such step. With --last, A has exactly the steps FIRST..LAST
    (a resumed run); with --same-samples, also the same consumed_samples at each."""
    a = {r["step"]: r for r in metrics(args.a)}
    b = {r["step"]: r for r in metrics(args.b)}
    first, key = args.first, args.key
    if args.last is not None:
        assert sorted(a) == list(range(first, args.last + 1)), f"{args.a} has steps {sorted(a)}, expected {first}-{args.last}"
    steps = [s for s in sorted(a) if s >= first]
    assert steps and all(s in b for s in steps), f"steps from {first}: {sorted(a)} not all in {sorted(b)}"
    worst = max(relative(a[s][key], b[s][key]) for s in steps)
    if args.same_samples:
        bad = [s for s in steps if a[s]["consumed_samples"] != b[s]["consumed_samples"]]
        assert not bad, f"consumed_samples differ at steps {bad}"
    assert worst <= args.rtol, f"largest relative difference of {key} {worst:.3g} > {args.rtol}"
    label = f"{args.label}: " if args.label else ""
    print(f"{label}steps {steps[0]}-{steps[-1]} agree; largest relative difference {worst:.3g}")


def validation_agree(args):
    """Run A's validation losses equal run B's at the same steps within rtol * max(1, |b|); both
    evaluated at exactly the steps given; val_ppl is exp(val_loss); the last one is below the first
    training loss (the model learned); each avg_loss is the mean of the losses since the previous log line."""
    import math
    a, b = metrics(args.a), metrics(args.b)
    want = [int(s) for s in args.steps.split(",")]
    for run, records in ((args.a, a), (args.b, b)):
        got = [r["step"] for r in records if "val_loss" in r]
        assert got == want, f"{run} evaluated at steps {got}, expected {want}"
        for r in records:
            if "val_loss" in r:
                assert abs(r["val_ppl"] - math.exp(r["val_loss"])) <= 1e-9 * r["val_ppl"], f"{run}: val_ppl at {r['step']}"
        last = [r for r in records if "val_loss" in r][-1]
        assert last["val_loss"] < records[0]["loss"], f"{run}: validation loss {last['val_loss']} did not fall"
        previous = 0
        for r in records:
            if "avg_loss" in r:
                window = [x["loss"] for x in records if previous < x["step"] <= r["step"]]
                assert abs(r["avg_loss"] - sum(window) / len(window)) <= 1e-12, f"{run}: avg_loss at {r['step']}"
                previous = r["step"]
    va = {r["step"]: r["val_loss"] for r in a if "val_loss" in r}
    vb = {r["step"]: r["val_loss"] for r in b if "val_loss" in r}
    worst = max(relative(va[s], vb[s]) for s in want)
    assert worst <= args.rtol, f"largest relative difference of val_loss {worst:.3g} > {args.rtol}"
    print(f"{args.label}: validation losses at steps {want} agree; largest relative difference {worst:.3g}")


def learns(args):
    """Each RUN's last loss is below its first by more than BY; with --ends-near REF, also within
    WITHIN of REF's last loss."""
    assert (args.ends_near is None) == (args.within is None), "--ends-near and --within go together"
    ref = metrics(args.ends_near)[-1]["loss"] if args.ends_near else None
    for run in args.runs:
        r = metrics(run)
        first, last = r[0]["loss"], r[-1]["loss"]
        assert last < first - args.by, f"{run}: loss {first} -> {last}, not down by {args.by}"
        if ref is not None:
            assert abs(last - ref) < args.within, f"{run}: last loss {last} vs {ref} of {args.ends_near}, not within {args.within}"
        near = f" ({os.path.basename(args.ends_near)} ends at {ref:.4f})" if ref is not None else ""
        print(f"{os.path.basename(run)}: loss {first:.4f} -> {last:.4f}{near}")


# ---- memory report ----------------------------------------------------------------------------


def zero_memory(args):
    """The fp32 Adam model state per rank (params + grads + master + optimizer bytes, first
    step) of a RUN at ZeRO stage STAGE is, within 2%: 16N at stage 0, 8N + 8N/d at 1,
    4N + 12N/d at 2 and 16N/d at 3, N each rank's parameters in BASELINE (its stage-0 run)."""
    d, zero = args.dp, args.stage
    ranks, whole = first_memory(args.run), first_memory(args.baseline)
    for r, w in zip(ranks, whole):
        n = w["params_bytes"] / 4
        total = r["params_bytes"] + r["grads_bytes"] + r["master_bytes"] + r["optimizer_bytes"]
        expected = {0: 16 * n, 1: 8 * n + 8 * n / d, 2: 4 * n + 12 * n / d, 3: 16 * n / d}[zero]
        assert abs(total - expected) <= 0.02 * expected, f"stage {zero}: {total} bytes, formula {expected} (rank {r})"
    print(f"    memory report, stage {zero}: {total / n:.3f} bytes per parameter on each of {len(ranks)} ranks")


def bf16_memory(args):
    """Every rank of a bf16 RUN at ZeRO stage STAGE (dp d) reports, for (params, grads, master,
    Adam): stage 0 (2N, 4N, 4N, 8N), 1 (2N, 4N, 4N, 8N/d), 2 (2N, 4N/d, 4N/d, 8N/d), 3 (0, 4N/d,
    4N/d, 8N/d), each at most 2% + 64 bytes over (shards are padded), N from FP32's rank 0."""
    n = first_memory(args.fp32)[0]["params_bytes"] // 4
    d = args.dp
    expected = {  # (params, grads, master, optimizer) per rank
        0: (2 * n, 4 * n, 4 * n, 8 * n),
        1: (2 * n, 4 * n, 4 * n, 8 * n / d),
        2: (2 * n, 4 * n / d, 4 * n / d, 8 * n / d),
        3: (0, 4 * n / d, 4 * n / d, 8 * n / d),
    }[args.stage]
    for rank in first_memory(args.run):
        got = (rank["params_bytes"], rank["grads_bytes"], rank["master_bytes"], rank["optimizer_bytes"])
        assert all(w <= g <= w * 1.02 + 64 for g, w in zip(got, expected)), f"{args.run}: got {got}, expected {expected} (N = {n})"
    print(f"{os.path.basename(args.run)}: memory per rank {sum(got) / n:.3f} bytes per parameter (params, grads, master, Adam: "
          f"{', '.join(f'{g / n:.2f}N' for g in got)})")


def activation_peaks_fall(args):
    """The first step's activation peak is positive on every rank of NONE and smaller on every
    rank of FULL and of SELECTIVE (recomputation keeps less)."""
    peaks = [[r["activation_peak_bytes"] for r in first_memory(d)] for d in (args.none, args.full, args.selective)]
    none, full, selective = peaks
    assert all(p > 0 for p in none), f"activation peaks of none: {none}"
    assert all(f < n for f, n in zip(full, none)) and all(s < n for s, n in zip(selective, none)), f"none, full, selective: {peaks}"
    print(f"{args.label}: activation peak per rank (KB) none {[n // 1024 for n in none]}, "
          f"full {[f // 1024 for f in full]}, selective {[s // 1024 for s in selective]}")


# ---- communication ---------------------------------------------------------------------------


def plan_vs_run(args):
    """After `loom plan --run RUN`: every rank's predicted calls and bytes equal its counters
    (plan_vs_run.json), and each rank's row of traffic.json's matrix sums to the bytes it sent
    (more than 0), never to itself."""
    run = args.run
    cmp = json.load(open(f"{run}/plan_vs_run.json"))
    bad = [(r["rank"], e) for r in cmp["ranks"] for e in r["entries"] if not e["equal"]]
    assert cmp["all_equal"] and not bad, f"predicted != counted: {bad[:3]}"
    groups = {e["group"] for r in cmp["ranks"] for e in r["entries"]}
    t = json.load(open(f"{run}/traffic.json"))
    for r, row in zip(t["ranks"], t["matrix_sent_bytes"]):
        sent = sum(c["sent"] for ops in r["groups"].values() for c in ops.values())
        assert sum(row) == sent > 0, f"rank {r['rank']}: matrix row sums to {sum(row)}, sent {sent}"
        assert row[r["rank"]] == 0, "a rank never sends to itself"
    print(f"{run.rstrip('/').split('/')[-1]}: predicted == counted on all {len(cmp['ranks'])} ranks for {sorted(groups)}; matrix sums match")


def two_level_traffic(args):
    """Every rank's dp traffic in RUN (traffic.json) split by level as the formulas give it, for a
    world of dp ranks on NODES nodes of L = world / NODES: hierarchical (--hierarchical), an
    all-reduce of b bytes sends 2(L-1)/L b inside the node and 2(N-1)/(N L) b across (one share
    per rank over the slow link), a reduce-scatter or all-gather (L-1) N b / P inside and
    (N-1) b / P across (a one-element sum's share is its whole element); flat, the ring sends each op's whole to the next rank, across only from a
    node's last rank. Prints each rank's inter-node bytes per step."""
    t = json.load(open(f"{args.run}/traffic.json"))
    world, nodes, steps = t["world"], args.nodes, t["steps"]
    local = world // nodes
    assert len(t["nodes"]) == nodes, f"traffic.json has nodes {t['nodes']}, expected {nodes}"
    inter_per_step = []
    for r in t["ranks"]:
        dp = r["groups"]["dp"]
        inter_total = 0
        for op, c in dp.items():
            b, intra, inter = c["bytes"], c["sent_intra_node"], c["sent_inter_node"]
            if op not in ("all_reduce", "reduce_scatter", "all_gather"):
                continue
            if args.hierarchical:
                if op == "all_reduce":
                    # --buckets gradient buckets a step (bucket_mb 0: 1 under ZeRO 0 and 1, none under
                    # 2 and 3), the rest one-element fp64 sums (the step's loss and norms): a share of
                    # those is one whole element, not 8 / L bytes.
                    scalars = c["calls"] - steps * args.buckets
                    big = b - 8 * scalars
                    assert scalars >= 0 and big >= 0, f"rank {r['rank']}: {c['calls']} all-reduces of {b} bytes"
                    want = (2 * (local - 1) * big // local + scalars * 2 * (local - 1) * 8,
                            2 * (nodes - 1) * big // (nodes * local) + scalars * 2 * (nodes - 1) * 8 // nodes)
                else:
                    want = ((local - 1) * nodes * b // world, (nodes - 1) * b // world)
            else:
                ring = {"all_reduce": 2 * (world - 1) * b // world}.get(op, (world - 1) * b // world)
                last_of_node = (r["rank"] + 1) % local == 0
                want = (0, ring) if last_of_node else (ring, 0)
            assert (intra, inter) == want, (f"rank {r['rank']} dp {op}: {b} bytes sent {intra} intra-node and {inter} "
                                             f"inter-node, the formula {want}")
            inter_total += inter
        inter_per_step.append(inter_total // steps)
    kind = "hierarchical" if args.hierarchical else "flat"
    print(f"{kind}: every rank's dp bytes by level equal the formulas; inter-node bytes per step by rank {inter_per_step}"
          f" (sum {sum(inter_per_step)})")


def hsdp_traffic(args):
    """HSDP with the shard group inside each node (parallel.dp_shard = L, world / NODES ranks a
    node): in RUN's traffic.json every rank's dp-shard collectives stay inside its node, and its
    dp-replicate all-reduces (each shard of the gradients, over the N nodes' ranks at its place)
    send 2(N-1)/N of their bytes to the next node and nothing inside: the slow link carries only
    a rank's 1/L share, as hierarchical does. Prints each rank's inter-node bytes per step."""
    t = json.load(open(f"{args.run}/traffic.json"))
    world, nodes, steps = t["world"], args.nodes, t["steps"]
    assert len(t["nodes"]) == nodes, f"traffic.json has nodes {t['nodes']}, expected {nodes}"
    inter_per_step = []
    for r in t["ranks"]:
        g = r["groups"]
        assert "dp-shard" in g and "dp-replicate" in g, f"rank {r['rank']}: no HSDP groups in {sorted(g)}"
        for op, c in g["dp-shard"].items():
            assert c["sent_inter_node"] == 0 and c["sent_intra_node"] == c["sent"] > 0, \
                f"rank {r['rank']} dp-shard {op}: {c['sent_intra_node']} intra, {c['sent_inter_node']} inter-node"
        assert set(g["dp-replicate"]) == {"all_reduce"}, f"rank {r['rank']}: dp-replicate ops {sorted(g['dp-replicate'])}"
        c = g["dp-replicate"]["all_reduce"]
        want = 2 * (nodes - 1) * c["bytes"] // nodes
        assert (c["sent_intra_node"], c["sent_inter_node"]) == (0, want), \
            (f"rank {r['rank']} dp-replicate all_reduce of {c['bytes']} bytes sent {c['sent_intra_node']} intra and "
             f"{c['sent_inter_node']} inter-node; the ring formula gives {want} across")
        inter = sum(c["sent_inter_node"] for ops in g.values() for c in ops.values())
        inter_per_step.append(inter // steps)
    print(f"hsdp: dp-shard inside the nodes, dp-replicate's ring across them; inter-node bytes per step by rank "
          f"{inter_per_step} (sum {sum(inter_per_step)})")


def compressed_bytes(args):
    """The dp bytes per step of WORK/{none,bf16,int8,powersgd} (tests/configs/tiny.yaml at dp
    --ranks, one bucket), rank 0, against the uncompressed run's: its G bytes of fp32 gradients a
    step (the all-reduces less their one-element fp64 sums) become G / 2 in bf16 (padded to whole
    chunks per rank, all-to-all and all-gathered); in int8 G / 4
    padded to whole 256-blocks per rank plus an fp32 scale per block, all-to-all (the other ranks'
    chunks) and all-gathered; in PowerSGD at rank r, from step --powersgd-start + 1, (n + m) r fp32
    per n x m matrix and the vectors whole (the tiny GPT's shapes below)."""
    def dp(name):
        t = json.load(open(f"{args.work}/{name}/traffic.json"))
        return t["steps"], t["ranks"][0]["groups"]["dp"]
    steps, none = dp("none")
    scalars = none["all_reduce"]["calls"] - steps
    grads = (none["all_reduce"]["bytes"] - 8 * scalars) // steps
    P = args.ranks
    _, bf16 = dp("bf16")
    half = -(-grads // (4 * P)) * P * 2  # the bf16 buffer, padded to whole chunks per rank
    assert bf16["all_reduce"]["bytes"] == 8 * scalars, f"bf16 all_reduce {bf16['all_reduce']}"
    assert bf16["all_to_all"]["bytes"] == steps * half * (P - 1) // P, f"bf16 all_to_all {bf16['all_to_all']}"
    assert bf16["all_gather"]["bytes"] == steps * half, f"bf16 all_gather {bf16['all_gather']} vs {half}"
    _, int8 = dp("int8")
    n = grads // 4
    padded = -(-n // (P * 256)) * P * 256
    wire = padded + padded // 256 * 4
    assert int8["all_reduce"]["bytes"] == 8 * scalars, f"int8 all_reduce {int8['all_reduce']}"
    assert int8["all_to_all"]["bytes"] == steps * wire * (P - 1) // P, f"int8 all_to_all {int8['all_to_all']} vs {wire}"
    assert int8["all_gather"]["bytes"] == steps * wire, f"int8 all_gather {int8['all_gather']} vs {wire}"
    # tiny.yaml: vocab 64, hidden 32, 2 blocks, seq 32, learned positions, tied embedding.
    r, H, V, S = args.powersgd_rank, 32, 64, 32
    matrices = [(V, H), (S, H)] + 2 * [(3 * H, H), (H, H), (4 * H, H), (H, 4 * H)]
    vectors = 2 * (H + H + 3 * H + H + H + H + 4 * H + H) + 2 * H
    assert sum(a * b for a, b in matrices) + vectors == n, f"the tiny GPT has {n} parameters, the shapes here another count"
    psgd_payload = (sum((a + b) * min(r, a, b) for a, b in matrices) + vectors) * 4
    plain = args.powersgd_start
    _, psgd = dp("powersgd")
    want = plain * grads + (steps - plain) * psgd_payload + 8 * scalars
    assert psgd["all_reduce"]["bytes"] == want, f"powersgd all_reduce bytes {psgd['all_reduce']['bytes']}, expected {want}"
    print(f"dp bytes a step on rank 0: none {grads}, bf16 {half * (P - 1) // P} all-to-all + {half} all-gather, int8 {wire * (P - 1) // P} all-to-all + "
          f"{wire} all-gather, PowerSGD rank {r} {psgd_payload} (from step {plain + 1}); plus {scalars // steps} "
          f"fp64 scalars a step in each")


def tp_traffic(args):
    """Rank 0's tp counters of a tiny.yaml run at tp=2 dp=1 (L=2, B=2, S=H=32, vocab 64, 20 steps
    of 4 micro-batches). Without SP, per micro-batch: 4L + 2 all-reduces of a [B, S, H] activation
    (per attention and MLP forward and backward, the embedding's, the output layer's input
    gradient) and the loss's two; nothing else. With SP: as many all-gather / reduce-scatter
    pairs, the loss's two all-reduces per micro-batch and one per step for the
    sequence-parallel gradients (norms, row biases, wpe)."""
    L, B, S, H, steps, micro = 2, 2, 32, 32, 20, 4
    bsh = B * S * H * 4  # bytes of one [B, S, H] fp32 activation
    ce = (B * S + 2 * B * S) * 4  # the loss: the max, then the exponential sum and target logit together
    c = json.load(open(f"{args.run}/comm_rank0.json"))["tp"]
    if not args.sequence_parallel:
        calls = steps * micro * (4 * L + 2 + 2)
        assert c["all_reduce"]["calls"] == calls, f"all_reduce calls {c['all_reduce']['calls']}, expected {calls}"
        expected = steps * micro * ((4 * L + 2) * bsh + ce)
        assert c["all_reduce"]["bytes"] == expected, f"all_reduce bytes {c['all_reduce']['bytes']}, expected {expected}"
        assert set(c) == {"all_reduce"}, f"ops {sorted(c)}, expected only all_reduce"
        print("tp traffic without SP matches the count per layer and micro-batch")
        return
    pairs = steps * micro * (4 * L + 2)
    for op in ("all_gather", "reduce_scatter"):
        assert c[op]["calls"] == pairs, f"{op} calls {c[op]['calls']}, expected {pairs}"
        assert c[op]["bytes"] == pairs * bsh, f"{op} bytes {c[op]['bytes']}, expected {pairs * bsh}"
    sp_grads = (L * (4 * H + 2 * H) + 2 * H + S * H) * 4
    calls, expected = steps * (micro * 2 + 1), steps * (micro * ce + sp_grads)
    assert c["all_reduce"]["calls"] == calls, f"all_reduce calls {c['all_reduce']['calls']}, expected {calls}"
    assert c["all_reduce"]["bytes"] == expected, f"all_reduce bytes {c['all_reduce']['bytes']}, expected {expected}"
    print("tp traffic with SP matches the count per layer and micro-batch")


def zero3_traffic(args):
    """Rank 0 of a ZeRO-3 RUN with one micro-batch per step gathers and reduce-scatters between
    2.8N and 3.03N bytes per step on dp, N rank 0's parameter bytes in BASELINE."""
    comm = json.load(open(args.run + "/comm_rank0.json"))["dp"]
    steps = sum(1 for _ in open(args.run + "/metrics.jsonl"))
    n_bytes = first_memory(args.baseline)[0]["params_bytes"]
    moved = (comm["all_gather"]["bytes"] + comm["reduce_scatter"]["bytes"]) / steps
    assert 2.8 * n_bytes <= moved <= 3.0 * n_bytes * 1.01, f"{moved} bytes per step, N = {n_bytes}"
    print(f"zero_stage 3, one micro-batch: {moved / n_bytes:.3f} N bytes gathered and reduce-scattered per step (rank 0)")


def trace_overlap(args):
    """RUN's trace_rank0.json has more than 2 buckets and bucket 0's all-reduce launched before
    backward was done."""
    t = json.load(open(f"{args.run}/trace_rank0.json"))
    events = [e["event"] for e in t["events"]]
    assert t["buckets"] > 2, f"{t['buckets']} buckets"
    first_launch = events.index("bucket 0 launched")
    assert first_launch < events.index("backward done"), f"bucket 0 launched after backward: {events}"
    launched_early = events.index("backward done")
    print(f"{t['buckets']} buckets; {launched_early} launched before backward ended; order: {events[:3]} ...")


# ---- per-feature records ---------------------------------------------------------------------


def pipeline_record(args):
    """Every step's `pipeline` record of RUN has P positive stage busy times, the bubble
    formula (p - 1) / (m v + p - 1) within 1e-12, and a measured bubble in [0, 1)."""
    p, v, m = args.pp, args.v, args.m
    # A split backward (zb-h1) counts F = B = W: the step is 3m units and the bubble p - 1 of them.
    formula = (p - 1) / (3 * m + p - 1) if args.zb else (p - 1) / (m * v + p - 1)
    for rec in (r["pipeline"] for r in metrics(args.run)):
        assert len(rec["stage_busy_ms"]) == p and all(b > 0 for b in rec["stage_busy_ms"]), f"{p} stages: {rec}"
        assert abs(rec["bubble_formula"] - formula) < 1e-12, f"p={p} m={m} v={v}: {rec}"
        assert 0 <= rec["bubble"] < 1, rec


def fp16_skipped_step(args):
    """An fp16 RUN with an overflow injected at STEP (a checkpoint after every step in CKPT):
    only STEP is skipped; the loss scale is SCALE up to STEP and SCALE/2 from there to LAST; the
    loss falls by more than 0.5; the checkpoints before and at STEP hold the same tensors and
    optimizer step count, the next one others; the loss scaler saved at STEP is halved with one
    skipped step."""
    r = metrics(args.run)
    step, scale = args.step, args.scale
    skipped = [x["step"] for x in r if x["skipped"]]
    assert skipped == [step], f"skipped steps {skipped}, expected [{step}]"
    scales = {x["step"]: x["loss_scale"] for x in r}
    assert all(scales[s] == scale for s in range(1, step + 1)) and all(scales[s] == scale // 2 for s in range(step + 1, args.last + 1)), f"loss scales {scales}"
    assert r[-1]["loss"] < r[0]["loss"] - 0.5, f"loss {r[0]['loss']} -> {r[-1]['loss']}"
    # The skipped step does not advance the schedule (Megatron-LM): the next step trains at its rate.
    lrs = {x["step"]: x["lr"] for x in r}
    assert lrs[step - 1] != lrs[step] == lrs[step + 1] != lrs[step + 2], f"learning rates around step {step}: {lrs}"

    def tensors(at):
        d = f"{args.ckpt}/step_{at:08d}"
        m = json.load(open(d + "/manifest.json"))
        out = {}
        for name, t in m["tensors"].items():
            data = b""
            for s in t["slices"]:
                with open(os.path.join(d, s["file"]), "rb") as f:
                    f.seek(s["byte_offset"])
                    data += f.read(s["nbytes"])
            out[name] = data
        return m, out

    m_before, t_before = tensors(step - 1)
    m_at, t_at = tensors(step)
    m_after, t_after = tensors(step + 1)
    optimizer_steps = (m_before["optimizer_steps"], m_at["optimizer_steps"], m_after["optimizer_steps"])
    assert optimizer_steps == (step - 1, step - 1, step), f"optimizer steps at {step - 1}, {step}, {step + 1}: {optimizer_steps}"
    assert t_before == t_at, f"tensors differ between steps {step - 1} and {step}: {[k for k in t_before if t_before[k] != t_at.get(k)][:5]}"
    assert any(t_at[k] != t_after[k] for k in t_at if k.startswith("model/")), f"the model did not change after step {step}"
    scaler = {"scale": scale / 2, "clean_steps": 0, "skipped_steps": 1}
    assert m_at["loss_scaler"] == scaler, f"loss scaler at step {step}: {m_at['loss_scaler']}, expected {scaler}"
    print(f"fp16: step {step} skipped (weights and moments of steps {step - 1} and {step} identical), scale {scale} -> {scale // 2}, "
          f"loss {r[0]['loss']:.4f} -> {r[-1]['loss']:.4f}")


def moe_routing(args):
    """Every step of each RUN counts TOKENS choices per MoE layer (layers 0 and 1), drops none,
    has an imbalance of at least 1 and a positive auxiliary loss."""
    for run in args.runs:
        for r in metrics(run):
            moe = r["moe"]
            assert moe["layers"] == [0, 1], f"{run}: layers {moe['layers']}"
            assert all(sum(t) == args.tokens for t in moe["tokens_per_expert"]), f"{run}: tokens per expert {moe['tokens_per_expert']}"
            assert moe["dropped_tokens"] == 0 and moe["max_imbalance"] >= 1.0 and moe["aux_loss"] > 0, f"{run}: {moe}"
    print(f"moe routing: {args.tokens} choices per layer and step, none dropped, in {len(args.runs)} runs")


def moe_drops(args):
    """The RUNs (one layout each, same capacity) drop the same tokens at every step, and some."""
    drops = {run: [r["moe"]["dropped_tokens"] for r in metrics(run)] for run in args.runs}
    first = drops[args.runs[0]]
    assert all(d == first for d in drops.values()) and sum(first) > 0, f"dropped tokens per step: {drops}"
    print(f"moe drops equal across {len(args.runs)} layouts ({sum(first)} dropped in {len(first)} steps)")


def moe_all_to_all(args):
    """The all-to-all bytes each rank of RUN sent, summed over metrics.jsonl's steps, equal its
    ep counters (and are more than 0); the bytes sent and received over all ranks are equal."""
    recs = metrics(args.run)
    for rank in range(args.np):
        counted = json.load(open(f"{args.run}/comm_rank{rank}.json"))["ep"]["all_to_all"]["sent"]
        reported = sum(r["moe"]["all_to_all"]["sent_bytes"][rank] for r in recs)
        assert counted == reported > 0, f"rank {rank}: counted {counted}, reported {reported}"
    sent = sum(sum(r["moe"]["all_to_all"]["sent_bytes"]) for r in recs)
    received = sum(sum(r["moe"]["all_to_all"]["received_bytes"]) for r in recs)
    assert sent == received, f"sent {sent}, received {received}"
    print(f"{os.path.basename(args.run)}: all-to-all bytes of {args.np} ranks equal the counters")


# ---- files -----------------------------------------------------------------------------------


def topology_tp2_pp2_dp2(args):
    """`loom topology --world 8` at tp=2 pp=2 (JSON in FILE) gives the groups and rank 6's
    coordinates written out by hand."""
    t = json.load(open(args.file))
    g = t["groups"]
    expected = {
        "tp": [[0, 1], [2, 3], [4, 5], [6, 7]],
        "dp": [[0, 2], [1, 3], [4, 6], [5, 7]],
        "pp": [[0, 4], [1, 5], [2, 6], [3, 7]],
        "model-parallel": [[0, 1, 4, 5], [2, 3, 6, 7]],
        "embedding": [[0, 4], [1, 5], [2, 6], [3, 7]],
    }
    for name, groups in expected.items():
        assert g[name] == groups, f"{name}: {g[name]}, expected {groups}"
    assert set(g) == {"tp", "cp", "pp", "dp", "ep", "expert-dp", "dp-cp", "expert-dp-cp", "model-parallel",
                      "embedding"}, f"groups {sorted(g)}"
    assert g["dp-cp"] == g["dp"] and g["cp"] == [[r] for r in range(8)], "with cp = 1 the gradient groups are dp's"
    rank6 = {"rank": 6, "tp": 0, "cp": 0, "pp": 1, "dp": 1, "ep": 0, "expert-dp": 1}
    assert t["ranks"][6] == rank6, f"rank 6: {t['ranks'][6]}, expected {rank6}"
    print("topology tp=2 pp=2 dp=2: groups and rank 6 as written by hand")


def flip_byte(args):
    """Not a check: flips the lowest bit of FILE's middle byte (a corrupted checkpoint)."""
    data = bytearray(open(args.file, "rb").read())
    data[len(data) // 2] ^= 0x01
    open(args.file, "wb").write(data)


def read_safetensors(path, strict=False):
    """safetensors by its specification: u64 header length, JSON header, then the data; F32
    tensors as torch tensors, and the metadata. strict: the data has no hole, overlap or
    trailing byte, and every tensor is F32 of its shape's size."""
    import torch

    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    meta = header.pop("__metadata__", {})
    if not strict:
        return {k: torch.frombuffer(bytearray(raw[8 + n + v["data_offsets"][0] : 8 + n + v["data_offsets"][1]]), dtype=torch.float32)
                for k, v in header.items()}, meta
    end = 0
    tensors = {}
    for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        begin, stop = info["data_offsets"]
        assert begin == end, f"{name}: hole or overlap in the data at {begin}"
        assert info["dtype"] == "F32", f"{name}: dtype {info['dtype']}"
        count = math.prod(info["shape"])
        assert stop - begin == 4 * count, f"{name}: {stop - begin} bytes for shape {info['shape']}"
        tensors[name] = torch.frombuffer(bytearray(raw[8 + n + begin : 8 + n + stop]), dtype=torch.float32).reshape(info["shape"])
        end = stop
    assert 8 + n + end == len(raw), "trailing bytes"
    return tensors, meta


def safetensors_close(args):
    """Two fp32 safetensors files (a run's final parameters) have the same tensor names, and
    every tensor of A is within RTOL of B's times max(1, B's largest |value|)."""
    a, _ = read_safetensors(args.a)
    b, _ = read_safetensors(args.b)
    worst = max(((a[k] - b[k]).abs().max() / b[k].abs().max().clamp(min=1)).item() for k in b)
    assert a.keys() == b.keys() and worst <= args.rtol, f"names differ ({sorted(a.keys() ^ b.keys())}) or largest relative difference {worst:.3g} > {args.rtol}"
    print(f"    final parameters agree; largest relative difference {worst:.3g}")


# hf_export.sh's model: tiny.yaml with vocab 256.
HF_L, HF_H, HF_V, HF_S, HF_HEADS = 2, 32, 256, 32, 4


def hf_gpt2_layout(args):
    """EXPORT is valid safetensors (no hole, overlap or trailing byte, F32, format pt) with
    exactly GPT-2's names and Conv1D shapes for hf_export.sh's model, and ROUND_TRIP (export ->
    model.init_from -> export) holds bit-identical tensors."""
    import torch

    a, meta = read_safetensors(args.export, strict=True)
    b, _ = read_safetensors(args.round_trip, strict=True)
    assert meta.get("format") == "pt", f"metadata {meta}"
    L, H, V, S = HF_L, HF_H, HF_V, HF_S
    expect = {"wte.weight": [V, H], "wpe.weight": [S, H], "ln_f.weight": [H], "ln_f.bias": [H]}
    for i in range(L):
        h = f"h.{i}."
        expect.update({h + "ln_1.weight": [H], h + "ln_1.bias": [H], h + "ln_2.weight": [H], h + "ln_2.bias": [H],
                       h + "attn.c_attn.weight": [H, 3 * H], h + "attn.c_attn.bias": [3 * H],
                       h + "attn.c_proj.weight": [H, H], h + "attn.c_proj.bias": [H],
                       h + "mlp.c_fc.weight": [H, 4 * H], h + "mlp.c_fc.bias": [4 * H],
                       h + "mlp.c_proj.weight": [4 * H, H], h + "mlp.c_proj.bias": [H]})
    shapes = {k: list(v.shape) for k, v in a.items()}
    assert shapes == expect, f"names and shapes {shapes}, expected {expect}"
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), "export -> init_from -> export changed tensors"
    print(f"safetensors valid: {len(a)} tensors in GPT-2 names and Conv1D shapes; the round trip is bit-identical")


def hf_gpt2_loss(args):
    """GPT-2's forward as Hugging Face computes it (Conv1D: x @ W + b; c_attn columns q | k | v),
    on EXPORT's tensors and the first 8 sequences of TEXT's bytes, gives RUN's first loss within
    1e-5 x max(1, |loss|)."""
    import torch

    a, _ = read_safetensors(args.export, strict=True)
    L, H, V, S, heads = HF_L, HF_H, HF_V, HF_S, HF_HEADS
    tokens = torch.tensor(list(open(args.text, "rb").read()), dtype=torch.long)
    G = 8
    x_tok = torch.stack([tokens[i * S : i * S + S] for i in range(G)])
    y_tok = torch.stack([tokens[i * S + 1 : i * S + S + 1] for i in range(G)])
    ln = lambda x, p: torch.nn.functional.layer_norm(x, (H,), a[p + ".weight"], a[p + ".bias"], 1e-5)
    x = a["wte.weight"][x_tok] + a["wpe.weight"][:S]
    mask = torch.ones(S, S, dtype=torch.bool).triu(1)
    for i in range(L):
        h = f"h.{i}."
        q, k, v = (ln(x, h + "ln_1") @ a[h + "attn.c_attn.weight"] + a[h + "attn.c_attn.bias"]).split(H, dim=-1)
        q, k, v = (t.view(G, S, heads, H // heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1) / math.sqrt(H // heads)).masked_fill(mask, float("-inf")).softmax(-1)
        ctx = (att @ v).transpose(1, 2).reshape(G, S, H)
        x = x + ctx @ a[h + "attn.c_proj.weight"] + a[h + "attn.c_proj.bias"]
        m = torch.nn.functional.gelu(ln(x, h + "ln_2") @ a[h + "mlp.c_fc.weight"] + a[h + "mlp.c_fc.bias"], approximate="tanh")
        x = x + m @ a[h + "mlp.c_proj.weight"] + a[h + "mlp.c_proj.bias"]
    logits = ln(x, "ln_f") @ a["wte.weight"].t()
    reference = torch.nn.functional.cross_entropy(logits.reshape(-1, V), y_tok.reshape(-1)).item()
    loom = metrics(args.run)[0]["loss"]
    assert abs(loom - reference) <= 1e-5 * max(1, abs(reference)), f"loom's loss {loom}, the reference forward's {reference}"
    print(f"Hugging Face-convention forward of the export: loss {reference:.6f}; loom from init_from: {loom:.6f}")


# ---- Hugging Face Llama directories (hf_llama.sh) ---------------------------------------------


def read_hf_dir(d, strict=False):
    """A Hugging Face model directory as transformers reads it: config.json, and the tensors of
    model.safetensors or of the shards model.safetensors.index.json maps them to."""
    config = json.load(open(os.path.join(d, "config.json")))
    index = os.path.join(d, "model.safetensors.index.json")
    if not os.path.exists(index):
        return config, read_safetensors(os.path.join(d, "model.safetensors"), strict)[0]
    tensors = {}
    for name, file in json.load(open(index))["weight_map"].items():
        shard, _ = read_safetensors(os.path.join(d, file), strict)
        assert name in shard, f"the index puts {name} in {file}, which lacks it"
        tensors[name] = shard[name]
    return config, tensors


def hf_llama_expected(c):
    """Llama's tensor names and shapes for config.json C (no biases), as transformers names them."""
    H, heads, kv, F, V = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["intermediate_size"], c["vocab_size"]
    d = H // heads
    expect = {"model.embed_tokens.weight": [V, H], "model.norm.weight": [H]}
    if not c["tie_word_embeddings"]:
        expect["lm_head.weight"] = [V, H]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        expect.update({p + "self_attn.q_proj.weight": [heads * d, H], p + "self_attn.k_proj.weight": [kv * d, H],
                       p + "self_attn.v_proj.weight": [kv * d, H], p + "self_attn.o_proj.weight": [H, heads * d],
                       p + "mlp.gate_proj.weight": [F, H], p + "mlp.up_proj.weight": [F, H], p + "mlp.down_proj.weight": [H, F],
                       p + "input_layernorm.weight": [H], p + "post_attention_layernorm.weight": [H]})
    return expect


def hf_llama_layout(args):
    """EXPORT is a Hugging Face Llama directory: config.json with LlamaForCausalLM and the
    shape keys given, model.safetensors valid (no hole, overlap or trailing byte, F32, format
    pt) with exactly Llama's names and shapes; ROUND_TRIP (export -> init_from at another layout
    -> export) has byte-identical files; SHARDED (a tiny --max-shard-size) has more than one
    shard, an index naming each tensor's shard and the total size, and the same tensors."""
    import filecmp
    import torch

    c, a = read_hf_dir(args.export, strict=True)
    _, meta = read_safetensors(os.path.join(args.export, "model.safetensors"), strict=True)
    assert meta.get("format") == "pt", f"metadata {meta}"
    want = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": args.hidden,
            "num_hidden_layers": args.layers, "num_attention_heads": args.heads, "num_key_value_heads": args.kv_heads,
            "vocab_size": args.vocab, "intermediate_size": args.ffn, "tie_word_embeddings": False, "hidden_act": "silu"}
    wrong = {k: c.get(k) for k, v in want.items() if c.get(k) != v}
    assert not wrong, f"config.json has {wrong}, expected {want}"
    expect = hf_llama_expected(c)
    shapes = {k: list(v.shape) for k, v in a.items()}
    assert shapes == expect, f"names and shapes {shapes}, expected {expect}"
    files = sorted(os.listdir(args.export))
    assert files == sorted(os.listdir(args.round_trip)) == ["config.json", "generation_config.json", "model.safetensors"], f"files {files}"
    _, mismatch, errors = filecmp.cmpfiles(args.export, args.round_trip, files, shallow=False)
    assert not mismatch and not errors, f"export -> init_from -> export changed {mismatch + errors}"

    index = json.load(open(os.path.join(args.sharded, "model.safetensors.index.json")))
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 1 and shards == sorted(f for f in os.listdir(args.sharded) if f.endswith(".safetensors")), f"shards {shards}"
    assert all(f == f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i, f in enumerate(shards)), f"shard names {shards}"
    _, s = read_hf_dir(args.sharded, strict=True)
    assert index["weight_map"].keys() == a.keys() and all(torch.equal(a[k], s[k]) for k in a), "the shards hold other tensors"
    total = sum(4 * t.numel() for t in a.values())
    assert index["metadata"]["total_size"] == total, f"total_size {index['metadata']['total_size']}, tensors {total}"
    print(f"Hugging Face Llama directory valid: {len(a)} tensors in Llama's names and shapes; the round trip is "
          f"byte-identical; {len(shards)} shards with an index naming each tensor's")


def hf_llama_loss(args):
    """Llama's forward as Hugging Face's modeling_llama computes it (RMSNorm in fp32; rotate-half
    RoPE, inv_freq = 1 / theta^(arange(0, d, 2) / d); kv heads repeated for grouped-query
    attention; SwiGLU; lm_head unless tied), written here without loom, on EXPORT's tensors and
    the first SEQUENCES sequences of SEQ_LEN + 1 of TEXT's bytes, gives RUN's first loss within
    1e-5 x max(1, |loss|)."""
    import torch
    import torch.nn.functional as fn

    c, a = read_hf_dir(args.export)
    shapes = hf_llama_expected(c)
    a = {k: v.reshape(shapes[k]) for k, v in a.items()}
    assert c.get("rope_scaling") is None, "this forward knows no rope scaling"
    H, heads, kv, V, eps = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["vocab_size"], c["rms_norm_eps"]
    d, S, G = H // heads, args.seq_len, args.sequences
    tokens = torch.tensor(list(open(args.text, "rb").read()), dtype=torch.long)
    x_tok = torch.stack([tokens[i * S : i * S + S] for i in range(G)])
    y_tok = torch.stack([tokens[i * S + 1 : i * S + S + 1] for i in range(G)])

    def rms_norm(x, weight):  # LlamaRMSNorm
        x32 = x.to(torch.float32)
        return weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)

    inv_freq = 1.0 / (c["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    freqs = torch.arange(S).float()[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()

    def rotate_half(x):
        return torch.cat((-x[..., d // 2 :], x[..., : d // 2]), dim=-1)

    linear = lambda x, p: x @ a[p + ".weight"].t()
    mask = torch.ones(S, S, dtype=torch.bool).triu(1)
    x = a["model.embed_tokens.weight"][x_tok]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms_norm(x, a[p + "input_layernorm.weight"])
        q = linear(h, p + "self_attn.q_proj").view(G, S, heads, d).transpose(1, 2)
        k = linear(h, p + "self_attn.k_proj").view(G, S, kv, d).transpose(1, 2)
        v = linear(h, p + "self_attn.v_proj").view(G, S, kv, d).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = (t[:, :, None].expand(G, kv, heads // kv, S, d).reshape(G, heads, S, d) for t in (k, v))  # repeat_kv
        att = (q @ k.transpose(-2, -1) / math.sqrt(d)).masked_fill(mask, float("-inf")).softmax(-1)
        x = x + linear((att @ v).transpose(1, 2).reshape(G, S, H), p + "self_attn.o_proj")
        h = rms_norm(x, a[p + "post_attention_layernorm.weight"])
        x = x + linear(fn.silu(linear(h, p + "mlp.gate_proj")) * linear(h, p + "mlp.up_proj"), p + "mlp.down_proj")
    out = a["model.embed_tokens.weight"] if c["tie_word_embeddings"] else a["lm_head.weight"]
    logits = rms_norm(x, a["model.norm.weight"]) @ out.t()
    reference = fn.cross_entropy(logits.reshape(-1, V), y_tok.reshape(-1)).item()
    loom = metrics(args.run)[0]["loss"]
    assert abs(loom - reference) <= 1e-5 * max(1, abs(reference)), f"loom's loss {loom}, the reference forward's {reference}"
    print(f"Hugging Face Llama forward of the export: loss {reference:.7f}; loom from init_from: {loom:.7f} "
          f"(|difference| {abs(loom - reference):.2g})")


def hf_scale_qk(args):
    """Not a check: multiplies the q_proj and k_proj weights in DIR/model.safetensors by FACTOR, in
    place: attention logits FACTOR^2 larger, so that a forward's loss depends on the rotary and
    kv-head conventions by far more than on rounding (a briefly trained model attends almost
    uniformly, and barely notices them)."""
    import torch

    path = os.path.join(args.dir, "model.safetensors")
    raw = bytearray(open(path, "rb").read())
    (n,) = struct.unpack("<Q", raw[:8])
    for name, info in json.loads(raw[8 : 8 + n]).items():
        if name.endswith(("self_attn.q_proj.weight", "self_attn.k_proj.weight")):
            begin, end = (8 + n + o for o in info["data_offsets"])
            raw[begin:end] = (torch.frombuffer(raw[begin:end], dtype=torch.float32) * args.factor).numpy().tobytes()
    open(path, "wb").write(raw)


def parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True, metavar="SUBCOMMAND")

    def command(name, function):
        summary = " ".join(function.__doc__.split()).split(". ")[0].rstrip(".")
        s = sub.add_parser(name, help=summary.replace("%", "%%"), description=function.__doc__)
        s.set_defaults(function=function)
        return s

    s = command("compare-metrics", compare_metrics)
    s.add_argument("a", help="metrics.jsonl")
    s.add_argument("b", help="metrics.jsonl")
    s.add_argument("--rtol", type=float, required=True)
    s.add_argument("--key", default="loss")
    s.add_argument("--routing-flips", action="store_true")
    s.add_argument("--rounds", action="store_true", help="with --routing-flips: the layout rounds by design")

    s = command("steps-agree", steps_agree)
    s.add_argument("a", metavar="RUN_A")
    s.add_argument("b", metavar="RUN_B")
    s.add_argument("--rtol", type=float, required=True)
    s.add_argument("--first", type=int, default=0)
    s.add_argument("--last", type=int)
    s.add_argument("--key", default="loss")
    s.add_argument("--same-samples", action="store_true")
    s.add_argument("--label", default="")

    s = command("validation-agree", validation_agree)
    s.add_argument("a", metavar="RUN_A")
    s.add_argument("b", metavar="RUN_B")
    s.add_argument("--rtol", type=float, required=True)
    s.add_argument("--steps", required=True, help="the steps both evaluated at, comma-separated")
    s.add_argument("--label", default="validation")

    s = command("learns", learns)
    s.add_argument("runs", nargs="+", metavar="RUN")
    s.add_argument("--by", type=float, required=True)
    s.add_argument("--ends-near", metavar="REF")
    s.add_argument("--within", type=float)

    s = command("zero-memory", zero_memory)
    s.add_argument("run")
    s.add_argument("--stage", type=int, required=True, choices=[0, 1, 2, 3])
    s.add_argument("--baseline", required=True)
    s.add_argument("--dp", type=int, required=True)

    s = command("bf16-memory", bf16_memory)
    s.add_argument("run")
    s.add_argument("--stage", type=int, required=True, choices=[0, 1, 2, 3])
    s.add_argument("--fp32", required=True)
    s.add_argument("--dp", type=int, required=True)

    s = command("activation-peaks-fall", activation_peaks_fall)
    s.add_argument("none")
    s.add_argument("full")
    s.add_argument("selective")
    s.add_argument("--label", required=True)

    command("plan-vs-run", plan_vs_run).add_argument("run")
    s = command("compressed-bytes", compressed_bytes)
    s.add_argument("work")
    s.add_argument("--ranks", type=int, required=True)
    s.add_argument("--powersgd-rank", type=int, required=True)
    s.add_argument("--powersgd-start", type=int, required=True)

    s = command("two-level-traffic", two_level_traffic)
    s.add_argument("run")
    s.add_argument("--nodes", type=int, required=True)
    s.add_argument("--hierarchical", action="store_true")
    s.add_argument("--buckets", type=int, default=1, help="gradient all-reduces a step")

    s = command("hsdp-traffic", hsdp_traffic)
    s.add_argument("run")
    s.add_argument("--nodes", type=int, required=True)

    s = command("tp-traffic", tp_traffic)
    s.add_argument("run")
    s.add_argument("--sequence-parallel", action="store_true")

    s = command("zero3-traffic", zero3_traffic)
    s.add_argument("run")
    s.add_argument("--baseline", required=True)

    command("trace-overlap", trace_overlap).add_argument("run")

    s = command("pipeline-record", pipeline_record)
    s.add_argument("run")
    s.add_argument("--pp", type=int, required=True)
    s.add_argument("--v", type=int, required=True)
    s.add_argument("--m", type=int, required=True, help="micro-batches per step")
    s.add_argument("--zb", action="store_true", help="a split-backward (zero-bubble) schedule")

    s = command("fp16-skipped-step", fp16_skipped_step)
    s.add_argument("run")
    s.add_argument("ckpt")
    s.add_argument("--step", type=int, required=True)
    s.add_argument("--scale", type=int, required=True)
    s.add_argument("--last", type=int, required=True)

    s = command("moe-routing", moe_routing)
    s.add_argument("runs", nargs="+", metavar="RUN")
    s.add_argument("--tokens", type=int, required=True, help="choices per layer and step")

    command("moe-drops", moe_drops).add_argument("runs", nargs="+", metavar="RUN")

    s = command("moe-all-to-all", moe_all_to_all)
    s.add_argument("run")
    s.add_argument("--np", type=int, required=True)

    command("topology-tp2-pp2-dp2", topology_tp2_pp2_dp2).add_argument("file")
    command("flip-byte", flip_byte).add_argument("file")

    s = command("safetensors-close", safetensors_close)
    s.add_argument("a")
    s.add_argument("b")
    s.add_argument("--rtol", type=float, required=True)

    s = command("hf-gpt2-layout", hf_gpt2_layout)
    s.add_argument("export")
    s.add_argument("round_trip")

    s = command("hf-gpt2-loss", hf_gpt2_loss)
    s.add_argument("export")
    s.add_argument("text")
    s.add_argument("run")

    s = command("hf-llama-layout", hf_llama_layout)
    s.add_argument("export")
    s.add_argument("round_trip")
    s.add_argument("sharded")
    for key in ("layers", "hidden", "heads", "kv-heads", "ffn", "vocab"):
        s.add_argument(f"--{key}", type=int, required=True)

    s = command("hf-scale-qk", hf_scale_qk)
    s.add_argument("dir")
    s.add_argument("factor", type=float)

    s = command("hf-llama-loss", hf_llama_loss)
    s.add_argument("export")
    s.add_argument("text")
    s.add_argument("run")
    s.add_argument("--seq-len", type=int, required=True)
    s.add_argument("--sequences", type=int, required=True)
    return p


def main(argv=None):
    args = parser().parse_args(argv)
    try:
        return args.function(args) or 0
    except AssertionError as e:
        print(f"FAIL checks.py {args.command}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
