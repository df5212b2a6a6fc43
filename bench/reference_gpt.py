"""The PyTorch side of loom's benchmark: a plain, idiomatic training script of
the same GPT (GPT-2 architecture: learned positions, pre-LayerNorm blocks,
causal attention, tanh-GELU MLP, tied output layer), the same AdamW (matrices
decayed, betas 0.9/0.95), gradient clipping at 1.0 and warm-up + cosine
learning rate, on random tokens. One process, or data parallel with
DistributedDataParallel on gloo under torchrun. On a GPU (--device cuda) it is
what a PyTorch 2.x user would write: bf16 autocast (--precision bf16),
scaled_dot_product_attention, the fused AdamW, NCCL for DDP.

Prints one JSON line: tokens/s per step (whole job), and the median after warm-up.
"""
import argparse
import contextlib
import json
import math
import os
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, hidden, heads, seq_len, fused_attention):
        super().__init__()
        self.heads = heads
        self.fused_attention = fused_attention
        self.ln_1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.ln_2 = nn.LayerNorm(hidden)
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
    def __init__(self, vocab, seq_len, hidden, heads, layers, fused_attention=False):
        super().__init__()
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Parameter(torch.zeros(seq_len, hidden))
        self.blocks = nn.ModuleList(Block(hidden, heads, seq_len, fused_attention) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden)
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
    """The arguments every reference script takes: the shape of the run, threads, device, precision."""
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--hidden", type=int, default=384)
    parser.add_argument("--heads", type=int, default=6)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=256)
    parser.add_argument("--global-batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup-steps", type=int, default=5, help="steps left out of the median")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--micro-batch", type=int, default=0, help="per rank; 0: the whole share of the batch")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")


def train(args, build_model):
    """Trains build_model(fused_attention) as loom trains its models and prints the result line."""
    torch.set_num_threads(args.threads)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    cuda = args.device == "cuda"
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    if world > 1:
        torch.distributed.init_process_group("nccl" if cuda else "gloo")
    torch.manual_seed(1234)
    fused_attention = cuda and hasattr(F, "scaled_dot_product_attention")
    model = build_model(fused_attention).to(device)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                                  lr=3e-4, betas=(0.9, 0.95), eps=1e-8, **({"fused": True} if cuda else {}))
    warmup = 2
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: (s + 1) / warmup if s < warmup else 0.1 + 0.45 * (1 + math.cos(math.pi * s / args.steps)))
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=25)
    batch = args.global_batch // world
    micro = args.micro_batch or batch
    generator = torch.Generator().manual_seed(rank)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.precision == "bf16")
    rates = []
    for step in range(args.steps):
        start = time.perf_counter()
        data = torch.randint(args.vocab, (batch, args.seq_len + 1), generator=generator).to(device)
        optimizer.zero_grad(set_to_none=True)
        for first in range(0, batch, micro):
            piece = data[first:first + micro]
            # DDP reduces gradients on the last micro-batch only.
            last = first + micro >= batch
            with autocast, (model.no_sync() if world > 1 and not last else contextlib.nullcontext()):
                loss = model(piece[:, :-1], piece[:, 1:]) * (piece.size(0) / batch)
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        loss.item()
        if cuda:
            torch.cuda.synchronize()
        rates.append(args.global_batch * args.seq_len / (time.perf_counter() - start))
    if rank == 0:
        result = {"side": "pytorch", "world": world, "device": args.device, "precision": args.precision,
                  "tokens_per_s": rates, "median_tokens_per_s": statistics.median(rates[args.warmup_steps:])}
        if cuda:
            result.update(torch_version=torch.__version__, gpu=torch.cuda.get_device_name(device),
                          max_memory_gib=torch.cuda.max_memory_allocated(device) / 2**30)
        print(json.dumps(result))
    if world > 1:
        torch.distributed.destroy_process_group()


def main():
    parser = argparse.ArgumentParser()
    add_training_arguments(parser)
    args = parser.parse_args()
    train(args, lambda fused_attention: GPT(args.vocab, args.seq_len, args.hidden, args.heads, args.layers,
                                            fused_attention))


if __name__ == "__main__":
    main()
