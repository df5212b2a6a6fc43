"""The PyTorch side of loom's benchmark: a plain training script of the same GPT
(GPT-2 architecture: learned positions, pre-LayerNorm blocks, causal attention,
tanh-GELU MLP, tied output layer) as PyTorch 2.x code is written: attention
through scaled_dot_product_attention, the fused AdamW (matrices decayed, betas
0.9/0.95), gradient clipping at 1.0 and loom's warm-up + cosine learning rate
(optim/lr_schedule.cpp), on random tokens. Eager, or with --compile the same
model through torch.compile. One process, or data parallel with
DistributedDataParallel on gloo under torchrun. On a GPU (--device cuda): bf16
autocast (--precision bf16), NCCL for DDP.

Prints one JSON line: tokens/s per step (whole job), the median after warm-up,
each step's loss, the parameter count, and the peak RSS
(getrusage(RUSAGE_SELF).ru_maxrss, the largest over the ranks).
"""
import argparse
import contextlib
import json
import math
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, hidden, heads, seq_len, fused_attention, eps=1e-5):
        super().__init__()
        self.heads = heads
        self.fused_attention = fused_attention
        self.ln_1 = nn.LayerNorm(hidden, eps=eps)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.ln_2 = nn.LayerNorm(hidden, eps=eps)
        self.fc = nn.Linear(hidden, 4 * hidden)
        self.fc_proj = nn.Linear(4 * hidden, hidden)
        # A plain attribute, not a buffer: DDP would broadcast buffers, and gloo has no bool.
        self.mask = torch.ones(seq_len, seq_len, dtype=torch.bool).triu(1)

    def attention(self, x):
        b, s, h = x.shape
        d = h // self.heads
        q, k, v = self.qkv(x).view(b, s, self.heads, 3, d).permute(3, 0, 2, 1, 4)
        if self.fused_attention:
            return self.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, h))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(d)
        probs = scores.masked_fill(self.mask[:s, :s].to(x.device), float("-inf")).softmax(-1)
        return self.proj((probs @ v).transpose(1, 2).reshape(b, s, h))

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.fc_proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, seq_len, hidden, heads, layers, fused_attention=False, eps=1e-5):
        super().__init__()
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Parameter(torch.zeros(seq_len, hidden))
        self.blocks = nn.ModuleList(Block(hidden, heads, seq_len, fused_attention, eps) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden, eps=eps)
        for p in self.parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, tokens, targets):
        x = self.wte(tokens) + self.wpe[: tokens.size(1)]
        for block in self.blocks:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def add_training_arguments(parser):
    """The arguments every reference script takes: the shape of the run, the optimizer and its
    schedule (loom's keys in brackets; bench/run.py passes loom's resolved config), threads,
    device, precision."""
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--hidden", type=int, default=384)
    parser.add_argument("--heads", type=int, default=6)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=256)
    parser.add_argument("--norm-eps", type=float, default=1e-5)
    parser.add_argument("--global-batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup-steps", type=int, default=5, help="steps left out of the median (not the lr's)")
    parser.add_argument("--lr", type=float, default=3e-4, help="train.lr")
    parser.add_argument("--min-lr", type=float, default=3e-5, help="train.min_lr")
    parser.add_argument("--lr-warmup-steps", type=int, default=2, help="train.warmup_steps")
    parser.add_argument("--weight-decay", type=float, default=0.1, help="train.weight_decay (matrices only)")
    parser.add_argument("--adam-beta1", type=float, default=0.9)
    parser.add_argument("--adam-beta2", type=float, default=0.95)
    parser.add_argument("--adam-eps", type=float, default=1e-8)
    parser.add_argument("--grad-clip", type=float, default=1.0, help="train.grad_clip; 0: none")
    parser.add_argument("--adamw", choices=["fused", "default"], default="fused",
                        help="fused: AdamW(fused=True), one kernel over all tensors (CPU since torch 2.4); "
                             "default: AdamW's own choice (a loop over tensors on CPU)")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (MKL's and ATen's one pool)")
    parser.add_argument("--micro-batch", type=int, default=0, help="per rank; 0: the whole share of the batch")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--profile-steps", default="",
                        help="A-B: torch.profiler over steps A..B (1-based, as loom's log.profile_step_start/end); "
                             "the kernels' table goes to stderr")
    parser.add_argument("--profile-trace", default="", help="with --profile-steps: the Chrome trace's path")
    parser.add_argument("--compile", action="store_true", help="train torch.compile(model) (DDP's model under torchrun)")
    parser.add_argument("--data", default="",
                        help="PREFIX of a loom dataset (PREFIX.bin, uint16 tokens): random windows of it; "
                             "empty: random tokens")
    parser.add_argument("--seed", type=int, default=1234, help="the model's initialisation (train.seed)")
    parser.add_argument("--powersgd-rank", type=int, default=0,
                        help="under DDP: PyTorch's PowerSGD comm hook at this rank (0: plain all-reduce)")
    parser.add_argument("--powersgd-start", type=int, default=10, help="PowerSGDState's start_powerSGD_iter")
    parser.add_argument("--no-error-feedback", action="store_true", help="PowerSGDState(use_error_feedback=False)")
    parser.add_argument("--powersgd-seed", type=int, default=None,
                        help="PowerSGDState's random_seed (its first Q); default: --seed")
    parser.add_argument("--loom-order", action="store_true",
                        help="with --data: loom's samples in loom's order (data.order: shuffled at --seed, "
                             "core/batch_sampler.cpp) split over the ranks as loom splits them, and each "
                             "step's loss the mean over the ranks (loom's metrics.jsonl loss)")
    parser.add_argument("--save-init", default="",
                        help="write the initial weights as a GPT-2 .safetensors (Hugging Face's names) "
                             "for loom's model.init_from, so that both start from the same weights")
    parser.add_argument("--init-from", default="",
                        help="start from a GPT-2 .safetensors (Hugging Face's names: loom export --format "
                             "hf-gpt2 of a checkpoint, e.g. loom's own initial weights at train.exit_after 0)")
    parser.add_argument("--eod-mask-loss", type=int, default=-1, metavar="ID",
                        help="targets whose input is ID are ignored (ignore_index), the loss the mean over the "
                             "global batch's targets left, as transformers' Trainer with num_items_in_batch")
    parser.add_argument("--manual-attention", action="store_true",
                        help="attention as matmul, mask, softmax, matmul instead of scaled_dot_product_attention")


def loom_lr(step, args):
    """loom's schedule (optim/lr_schedule.cpp): linear warm-up over train.warmup_steps, then cosine
    from lr to min_lr over the remaining steps, the last step at min_lr."""
    if step < args.lr_warmup_steps:
        return args.lr * (step + 1) / args.lr_warmup_steps
    decay_steps = max(1, args.steps - 1 - args.lr_warmup_steps)
    progress = min(1.0, (step - args.lr_warmup_steps) / decay_steps)
    return args.min_lr + 0.5 * (args.lr - args.min_lr) * (1.0 + math.cos(math.pi * progress))


def mt19937_64(seed):
    """The C++ standard's std::mt19937_64, whose outputs the standard fixes: loom shuffles with it."""
    mask, n, m = (1 << 64) - 1, 312, 156
    state = [seed & mask]
    for i in range(1, n):
        state.append((6364136223846793005 * (state[-1] ^ (state[-1] >> 62)) + i) & mask)
    index = n
    while True:
        if index >= n:
            for i in range(n):
                x = (state[i] & 0xFFFFFFFF80000000) | (state[(i + 1) % n] & 0x7FFFFFFF)
                state[i] = state[(i + m) % n] ^ (x >> 1) ^ (0xB5026F5AA96619E9 if x & 1 else 0)
            index = 0
        y = state[index]
        index += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        yield (y ^ (y >> 43)) & mask


def loom_epoch_order(num_samples, seed):
    """data.order: shuffled's first epoch as loom draws it (core/batch_sampler.cpp's Fisher-Yates)."""
    draws = mt19937_64(seed ^ ((0xD1B54A32D192ED03 * 1) & ((1 << 64) - 1)))
    order = list(range(num_samples))
    for i in range(num_samples - 1, 0, -1):
        j = next(draws) % (i + 1)
        order[i], order[j] = order[j], order[i]
    return order


def save_gpt2_safetensors(model, heads, path):
    """The model's weights under GPT-2's names and Conv1D layout ([in, out]) for loom's
    model.init_from. GPT-2's c_attn holds q, k, v one after the other where this model's qkv
    (as loom's) holds each head's q, k, v together."""
    from safetensors.torch import save_file
    out = {"wte.weight": model.wte.weight, "wpe.weight": model.wpe, "ln_f.weight": model.ln_f.weight,
           "ln_f.bias": model.ln_f.bias}
    for i, block in enumerate(model.blocks):
        h = f"h.{i}."
        hidden = block.proj.weight.size(0)
        qkv_w = block.qkv.weight.view(heads, 3, hidden // heads, hidden).transpose(0, 1).reshape(3 * hidden, hidden)
        qkv_b = block.qkv.bias.view(heads, 3, hidden // heads).transpose(0, 1).reshape(3 * hidden)
        out.update({h + "ln_1.weight": block.ln_1.weight, h + "ln_1.bias": block.ln_1.bias,
                    h + "attn.c_attn.weight": qkv_w.t(), h + "attn.c_attn.bias": qkv_b,
                    h + "attn.c_proj.weight": block.proj.weight.t(), h + "attn.c_proj.bias": block.proj.bias,
                    h + "ln_2.weight": block.ln_2.weight, h + "ln_2.bias": block.ln_2.bias,
                    h + "mlp.c_fc.weight": block.fc.weight.t(), h + "mlp.c_fc.bias": block.fc.bias,
                    h + "mlp.c_proj.weight": block.fc_proj.weight.t(), h + "mlp.c_proj.bias": block.fc_proj.bias})
    save_file({k: v.detach().contiguous().clone() for k, v in out.items()}, path)


def load_gpt2_safetensors(model, heads, path):
    """The inverse of save_gpt2_safetensors: every weight of the model from PATH."""
    from safetensors.torch import load_file
    saved = {k.removeprefix("transformer."): v for k, v in load_file(path).items()}
    with torch.no_grad():
        model.wte.weight.copy_(saved["wte.weight"])
        model.wpe.copy_(saved["wpe.weight"][: model.wpe.size(0)])
        model.ln_f.weight.copy_(saved["ln_f.weight"])
        model.ln_f.bias.copy_(saved["ln_f.bias"])
        for i, block in enumerate(model.blocks):
            h = f"h.{i}."
            hidden = block.proj.weight.size(0)
            qkv_w = saved[h + "attn.c_attn.weight"].t().reshape(3, heads, hidden // heads, hidden).transpose(0, 1)
            block.qkv.weight.copy_(qkv_w.reshape(3 * hidden, hidden))
            block.qkv.bias.copy_(saved[h + "attn.c_attn.bias"].view(3, heads, hidden // heads).transpose(0, 1).reshape(-1))
            for mine, theirs in ((block.proj, "attn.c_proj"), (block.fc, "mlp.c_fc"), (block.fc_proj, "mlp.c_proj")):
                mine.weight.copy_(saved[h + theirs + ".weight"].t())
                mine.bias.copy_(saved[h + theirs + ".bias"])
            for mine, theirs in ((block.ln_1, "ln_1"), (block.ln_2, "ln_2")):
                mine.weight.copy_(saved[h + theirs + ".weight"])
                mine.bias.copy_(saved[h + theirs + ".bias"])


def peak_rss_bytes():
    """This process's peak resident set size so far (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def graphs_compiled():
    """How many graphs torch.compile has made in this process (0 before any)."""
    try:
        from torch._dynamo.utils import counters
        return int(counters["stats"]["unique_graphs"])
    except Exception:  # noqa: BLE001 - only a diagnostic
        return -1


def train(args, build_model):
    """Trains build_model(fused_attention) as loom trains its models and prints the result line.
    Under torchrun (world > 1) it then ends the process: nothing runs after it."""
    torch.set_num_threads(args.threads)
    rss_at_start = peak_rss_bytes()  # the interpreter and torch, before the model
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    cuda = args.device == "cuda"
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    if world > 1:
        torch.distributed.init_process_group("nccl" if cuda else "gloo")
    torch.manual_seed(args.seed)
    fused_attention = hasattr(F, "scaled_dot_product_attention") and not args.manual_attention
    model = build_model(fused_attention).to(device)
    if args.init_from:
        load_gpt2_safetensors(model, args.heads, args.init_from)
    if args.save_init and rank == 0:
        save_gpt2_safetensors(model, args.heads, args.save_init)
    parameters = sum(p.numel() for p in model.parameters())  # unique: a tied weight counts once
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr, betas=(args.adam_beta1, args.adam_beta2), eps=args.adam_eps,
        **({"fused": True} if args.adamw == "fused" else {}))
    # LambdaLR multiplies the base lr (args.lr) by the factor: loom's lr at each step.
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: loom_lr(s, args) / args.lr)
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=25)
        if args.powersgd_rank > 0:
            # PyTorch's own PowerSGD (DDP comm hook): the outside reference for loom's
            # parallel.grad_compression: powersgd (bench/compression.sh).
            from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
            state = powerSGD_hook.PowerSGDState(
                process_group=None, matrix_approximation_rank=args.powersgd_rank,
                start_powerSGD_iter=args.powersgd_start, use_error_feedback=not args.no_error_feedback,
                warm_start=True,
                random_seed=args.seed if args.powersgd_seed is None else args.powersgd_seed)
            model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    if args.compile:
        model = torch.compile(model)
    batch = args.global_batch // world
    micro = args.micro_batch or batch
    generator = torch.Generator().manual_seed(args.seed * 1000 + rank)
    tokens = None
    if args.data:
        import numpy
        tokens = torch.from_numpy(numpy.fromfile(args.data + ".bin", dtype=numpy.uint16).astype(numpy.int64))
        if args.loom_order:
            order = loom_epoch_order((len(tokens) - 1) // args.seq_len, args.seed)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.precision == "bf16")
    rates, losses, graphs_after_warmup = [], [], 0
    profile_first, profile_last = (map(int, args.profile_steps.split("-")) if args.profile_steps else (0, 0))
    profiler = None
    for step in range(args.steps):
        if step == args.warmup_steps:
            graphs_after_warmup = graphs_compiled()
        if step + 1 == profile_first and rank == 0:
            kinds = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
            profiler = torch.profiler.profile(activities=kinds)
            profiler.__enter__()
        start = time.perf_counter()
        if tokens is None:
            data = torch.randint(args.vocab, (batch, args.seq_len + 1), generator=generator).to(device)
        elif args.loom_order:  # this rank's share of global batch STEP (core/batch_sampler.h)
            first_position = step * args.global_batch + rank * batch
            starts = [order[p] * args.seq_len for p in range(first_position, first_position + batch)]
            data = torch.stack([tokens[i:i + args.seq_len + 1] for i in starts]).to(device)
        else:
            starts = torch.randint(len(tokens) - args.seq_len - 1, (batch,), generator=generator)
            data = torch.stack([tokens[i:i + args.seq_len + 1] for i in starts.tolist()]).to(device)
        optimizer.zero_grad(set_to_none=True)
        step_loss = 0.0
        if args.eod_mask_loss >= 0:
            # The targets that count in the whole global batch: this rank's, summed over the ranks.
            counted = torch.tensor([int((data[:, :-1] != args.eod_mask_loss).sum())], dtype=torch.int64, device=device)
            if world > 1:
                torch.distributed.all_reduce(counted)
            counted = int(counted.item())
        for first in range(0, batch, micro):
            piece = data[first:first + micro]
            # DDP reduces gradients on the last micro-batch only.
            last = first + micro >= batch
            targets = piece[:, 1:]
            if args.eod_mask_loss >= 0:
                targets = targets.masked_fill(piece[:, :-1] == args.eod_mask_loss, -100)
                here = int((targets != -100).sum())
                assert here > 0, "a micro-batch with every target ignored: cross_entropy's mean would be nan"
            with autocast, (model.no_sync() if world > 1 and not last else contextlib.nullcontext()):
                if args.eod_mask_loss >= 0:
                    # The piece's mean over its own targets, times their count: its sum; DDP then averages.
                    loss = model(piece[:, :-1], targets) * (here * world / counted)
                else:
                    loss = model(piece[:, :-1], targets) * (piece.size(0) / batch)
            loss.backward()
            step_loss += loss.item()
        if args.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        optimizer.step()
        schedule.step()
        if cuda:
            torch.cuda.synchronize()
        rates.append(args.global_batch * args.seq_len / (time.perf_counter() - start))
        if args.loom_order and world > 1:
            mean = torch.tensor([step_loss / world])
            torch.distributed.all_reduce(mean)
            step_loss = mean.item()
        losses.append(step_loss)
        if profiler is not None and step + 1 == profile_last:
            profiler.__exit__(None, None, None)
            print(profiler.key_averages().table(sort_by="cuda_time_total" if cuda else "self_cpu_time_total",
                                                row_limit=25, max_name_column_width=90), file=sys.stderr)
            if args.profile_trace:
                profiler.export_chrome_trace(args.profile_trace)
            profiler = None
    peak = torch.tensor([peak_rss_bytes(), rss_at_start], dtype=torch.int64)
    if world > 1:
        torch.distributed.all_reduce(peak, op=torch.distributed.ReduceOp.MAX)
    if rank == 0:
        timed = rates[args.warmup_steps:] or rates
        result = {"side": "pytorch", "torch_version": torch.__version__, "world": world, "device": args.device,
                  "precision": args.precision, "compile": args.compile, "threads": torch.get_num_threads(),
                  "attention": "sdpa" if fused_attention else "manual", "adamw": args.adamw,
                  "parameters": parameters, "tokens_per_s": rates, "median_tokens_per_s": statistics.median(timed),
                  "losses": losses, "peak_rss_bytes": int(peak[0]), "rss_at_start_bytes": int(peak[1])}
        if args.compile:
            # The first step's time beyond a timed step's is (mostly) compilation; graphs made after
            # the warm-up steps would mean a recompilation inside the timed steps.
            result["first_step_s"] = args.global_batch * args.seq_len / rates[0]
            result["graphs_compiled"] = graphs_compiled()
            result["graphs_compiled_after_warmup"] = (result["graphs_compiled"] - graphs_after_warmup
                                                      if args.warmup_steps < args.steps else 0)
        if cuda:
            result.update(gpu=torch.cuda.get_device_name(device), cuda_version=torch.version.cuda,
                          max_memory_gib=torch.cuda.max_memory_allocated(device) / 2**30)
        print(json.dumps(result))
    if world > 1:
        # No rank tears down while a peer still talks to it; then the process leaves without the
        # interpreter's finalisation. A gloo worker thread can still be dropping its last reference
        # to a Python tensor after the collective returned; under finalisation its wait for the
        # GIL ends the thread by pthread_exit through a C++ frame, and the rank aborted
        # ("terminate called without an active exception", c10d::ProcessGroupGloo::runLoop in its
        # stack) in 5 of 6 runs at dp 4 on 2 cores, 2 of 15 with the group destroyed first.
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def main():
    parser = argparse.ArgumentParser()
    add_training_arguments(parser)
    args = parser.parse_args()
    train(args, lambda fused_attention: GPT(args.vocab, args.seq_len, args.hidden, args.heads, args.layers,
                                            fused_attention, args.norm_eps))


if __name__ == "__main__":
    main()
