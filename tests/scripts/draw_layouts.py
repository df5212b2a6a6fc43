"""Draws random training layouts for tests/scripts/random_layouts.sh: one line per draw,
"NP NAME MODEL_SETS | LAYOUT_SETS", each SETS a space-separated list of key=value.

The space: model gpt2 (dense or MoE) or llama (1, 2 or 4 kv heads, tied or not; dense or MoE with
SwiGLU experts, shared experts and dense blocks; Qwen3's head_dim and q/k norms, or DeepSeek-V3's
latent attention with interleaved rotary features and YaRN; multi-token prediction); tp, cp
(ring or all-to-all), pp and dp over at most 8 ranks, sequence parallelism, pipeline schedule (gpipe, 1f1b,
interleaved, zb-h1), ZeRO stage, HSDP (parallel.dp_shard), flat or hierarchical gradient collectives over nodes, gradients sent in
bf16 (parallel.grad_compression), recomputation, micro-batch size, ep for MoE (and experts split over tp), a validation
split evaluated at steps 10 and 20 or none, the optimizer (AdamW, or Muon beside it), the loss
masked after an end-of-document id (data.eod_mask_loss) or not, and for MoE
the router (softmax top-k, or DeepSeek-V3's sigmoid, grouped, scaled and biased). Every draw is a
valid config on tests/configs/tiny.yaml (global batch 8, seq 32, 4 heads) with 8 layers.
"""
import random
import sys


def even_nodes(tp, cp, ep, dp, pp, ranks_per_node):
    """Whether nodes of RANKS_PER_NODE consecutive ranks hold equal shares of every gradient group
    (dp-cp and expert-dp-cp) of the grid in the default order tp-cp-ep-dp-pp, as
    parallel.dp_collectives: hierarchical needs."""
    def rank(t, c, d, p):  # d: the dp position, ep fastest
        return t + tp * (c + cp * (d + dp * p))
    groups = []
    for t in range(tp):
        for p in range(pp):
            groups.append([rank(t, c, d, p) for c in range(cp) for d in range(dp)])
            for e in range(ep):
                groups.append([rank(t, c, e + ep * i, p) for c in range(cp) for i in range(dp // ep)])
    for g in groups:
        counts = {}
        for r in g:
            counts[r // ranks_per_node] = counts.get(r // ranks_per_node, 0) + 1
        if len(set(counts.values())) != 1:
            return False
    return True


def draw(rng, index):
    model = ["model.num_layers=8"]
    arch = rng.choice(["gpt2", "llama"])
    moe = rng.random() < 0.35
    if arch == "llama":
        model += ["model.arch=llama", "model.ffn_hidden_size=64",
                  f"model.num_kv_heads={rng.choice([1, 2, 4])}",
                  f"model.tie_embeddings={rng.choice(['true', 'false'])}"]
    if moe:
        model += ["model.moe.num_experts=4", "model.moe.top_k=2"]
    attention = rng.choice(["gqa", "gqa", "qwen3", "mla"]) if arch == "llama" else "mha"
    if attention == "qwen3":
        # Qwen3's attention: heads of 16 (hidden 32 / 4 heads would be 8) with q/k norms.
        model += ["model.head_dim=16", "model.qk_norm=true"]
    if attention == "mla":
        # DeepSeek-V3's latent attention (a query latent or none), interleaved rotary features, YaRN.
        model = [m for m in model if not m.startswith("model.num_kv_heads=")] + [
            "model.num_kv_heads=4", "model.mla.kv_lora_rank=16", f"model.mla.q_lora_rank={rng.choice([0, 24])}",
            "model.mla.qk_nope_head_dim=8", "model.mla.qk_rope_head_dim=4", "model.mla.v_head_dim=6",
            "model.rope_interleave=true", "model.rope_scaling.type=yarn", "model.rope_scaling.factor=4",
            "model.rope_scaling.original_max_position_embeddings=8", "model.rope_scaling.mscale_all_dim=1"]
    if moe and arch == "llama":
        # SwiGLU experts of their own width; half the draws with a shared expert and the first
        # blocks dense (DeepSeek-V3), or every other block dense (Qwen3-MoE's decoder_sparse_step).
        model += ["model.moe.moe_intermediate_size=24"]
        if rng.random() < 0.5:
            model += ["model.moe.n_shared_experts=1", f"model.moe.first_k_dense_replace={rng.choice([1, 3])}"]
        else:
            model += ["model.moe.decoder_sparse_step=2"]
    while True:
        tp, pp, dp = rng.choice([1, 2, 4]), rng.choice([1, 2, 4]), rng.choice([1, 2, 2, 4])
        # Context parallelism.
        cp = rng.choice([1, 1, 2, 4])
        # MoE's auxiliary losses are per micro-batch: its draws keep the reference's micro-batch size.
        # A pipeline needs at least pp micro-batches per step (global batch 8 = micro x count x dp).
        micros = [m for m in ((2,) if moe else (1, 2, 4)) if 8 % (m * dp) == 0 and 8 // (m * dp) >= pp]
        if 1 < tp * pp * dp * cp <= 8 and micros:
            break
    micro = rng.choice(micros)
    zero = rng.choice([0, 1, 2, 3])
    layout = [f"parallel.tp={tp}", f"parallel.pp={pp}", f"train.micro_batch_size={micro}",
              f"parallel.zero_stage={zero}",
              f"train.recompute={rng.choice(['none', 'full', 'selective'])}"]
    if tp > 1 and rng.random() < 0.5:
        layout.append("parallel.sequence_parallel=true")
    if cp > 1:
        layout.append(f"parallel.cp={cp}")
        # All-to-all needs each tp rank's heads (4 / tp) and kv heads divisible by cp.
        kv = 4 if arch == "gpt2" else int(next(m for m in model if m.startswith("model.num_kv_heads=")).split("=")[1])
        kv_local = max(kv // tp, 1)
        if (4 // tp) % cp == 0 and kv_local % cp == 0 and rng.random() < 0.5:
            layout.append("parallel.cp_comm=a2a")
    if pp > 1:
        micro_batches = 8 // (micro * dp)
        schedules = ["gpipe", "1f1b", "zb-h1"] + (["interleaved"] if micro_batches % pp == 0 else [])
        schedule = rng.choice(schedules)
        layout.append(f"parallel.schedule={schedule}")
        if schedule == "interleaved":
            layout.append("parallel.virtual_stages=2")
    if moe:
        layout.append(f"parallel.ep={rng.choice([e for e in (1, 2) if dp % e == 0])}")
        # Half the MoE draws with tp split each expert's width over it (expert tensor parallelism).
        if tp > 1 and rng.random() < 0.5:
            layout.append(f"parallel.expert_tp={tp}")
    # A third of the draws with dp run the gradient collectives in two levels (inside each node, then
    # across) over nodes of ranks_per_node consecutive ranks: any divisor of the world whose nodes
    # hold equal shares of every gradient group.
    ep = next((int(s.split("=")[1]) for s in layout if s.startswith("parallel.ep=")), 1)
    if dp > 1 and rng.random() < 0.35:
        world = tp * cp * pp * dp
        nodes = [d for d in range(1, world + 1) if world % d == 0 and even_nodes(tp, cp, ep, dp, pp, d)]
        layout += [f"parallel.ranks_per_node={rng.choice(nodes)}", "parallel.dp_collectives=hierarchical"]
    # A third of the draws with ZeRO over more than one dp rank shard inside groups of dp_shard dp
    # ranks and replicate across them (HSDP).
    if zero >= 1 and dp > 1 and rng.random() < 0.35:
        layout.append(f"parallel.dp_shard={rng.choice([s for s in (1, 2) if s < dp])}")
    # A quarter of the draws whose gradients go through buckets (ZeRO 0 and 1) over more than one rank
    # send them in bf16 (parallel.grad_compression: bf16, error feedback on): lossy by design, so
    # random_layouts.sh holds them to the bar for compression, 2% of the loss.
    if zero <= 1 and dp * cp > 1 and rng.random() < 0.25:
        layout.append("parallel.grad_compression=bf16")
    # Half the draws also evaluate a validation split (its traffic is not in the cost model's step).
    validate = rng.random() < 0.5
    if validate:
        model += ["data.split=90,10,0", "eval.interval=10", "eval.steps=1"]
    # A third of the draws train with Muon (its own lr for the blocks' matrices), reference and layout alike.
    muon = rng.random() < 0.35
    if muon:
        model += ["train.optimizer=muon", "train.muon.lr=0.02"]
    # Half the MoE draws route as DeepSeek-V3 does: sigmoid scores, 2 groups of 2 experts (the best
    # one eligible), scaled weights, expert biases moved every step.
    if moe and rng.random() < 0.5:
        model += ["model.moe.score=sigmoid", "model.moe.n_group=2", "model.moe.topk_group=1",
                  "model.moe.routed_scaling_factor=2.5", "model.moe.bias_update_rate=0.01",
                  f"model.moe.norm_topk_prob={rng.choice(['true', 'false'])}"]
    # A quarter of the draws predict more tokens (DeepSeek-V3's MTP).
    if rng.random() < 0.25:
        model += [f"model.mtp.depth={rng.choice([1, 2])}", "model.mtp.loss_weight=0.3"]
    # The balance loss over each micro-batch, each sequence (its parts gathered from cp and SP), or none.
    if moe:
        model.append(f"model.moe.aux_loss_type={rng.choice(['batch', 'sequence', 'none'])}")
    mtp = any(m.startswith("model.mtp.depth=") for m in model)
    # A third of the draws without MTP leave the target after an "end of document" out of the loss
    # (data.eod_mask_loss): tiny.yaml's synthetic corpus (seed 99) holds ids 50, 38 and 8 as about
    # 10.5%, 9.4% and 8.4% of its tokens, so micro-batches keep different counts of targets.
    eod = not mtp and rng.random() < 0.35
    if eod:
        model += ["data.eod_mask_loss=true", f"data.eod_id={rng.choice([50, 38, 8])}"]
    name = (f"draw{index}_{arch}{'_mla' if attention == 'mla' else ''}{'_moe' if moe else ''}{'_mtp' if mtp else ''}"
            f"{'_val' if validate else ''}{'_muon' if muon else ''}{'_eod' if eod else ''}"
            f"_tp{tp}_cp{cp}_pp{pp}_dp{dp}{'_hier' if 'parallel.dp_collectives=hierarchical' in layout else ''}"
            f"{'_hsdp' if any(s.startswith('parallel.dp_shard=') for s in layout) else ''}"
            f"{'_bf16c' if 'parallel.grad_compression=bf16' in layout else ''}")
    return f"{tp * cp * pp * dp} {name} {' '.join(model)} | {' '.join(layout)}"


def main(argv):
    seed, count = int(argv[1]), int(argv[2])
    rng = random.Random(seed)
    for i in range(count):
        print(draw(rng, i))


if __name__ == "__main__":
    main(sys.argv)
