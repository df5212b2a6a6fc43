"""Muon in plain PyTorch, written from its definition (not from loom's code), training a Hugging Face
model the way loom trains it, as the reference for loom's train.optimizer: muon.

    muon_reference.py DIR TEXT RUN --seq-len S --sequences G --steps N --lr LR --min-lr MIN
        --warmup W --weight-decay WD [--muon-lr MLR] [--muon-weight-decay MWD] [--momentum MU]
        [--no-nesterov] [--ns-steps K] [--grad-clip C]

trains DIR (saved by save_pretrained) for N steps on TEXT's bytes in loom's sequential order
(sequence j is bytes [j S, j S + S + 1), step k takes sequences k G .. k G + G - 1) and checks
every step's loss against RUN's metrics.jsonl within 1e-5 x max(1, |loss|).

The parameter groups, as the issue defines them: every 2-D weight inside the transformer blocks
gets Muon (GPT-2's c_attn as three matrices q, k, v; its Conv1D weights are the transposes of
the logical matrices); embeddings, the output layer, norms and biases get torch.optim.AdamW with
weight decay on matrices only. Both follow loom's warm-up + cosine schedule, each from its own
peak; the global gradient norm is clipped over all parameters first.

Muon's update of a weight W (m x n) with gradient G: B <- mu B + G; U <- G + mu B (Nesterov) or
B; X <- U / (||U||_F + 1e-7); on X^T when m > n, K times A <- X X^T, X <- a X + (b A + c A A) X
with (a, b, c) = (3.4445, -4.7750, 2.0315); W <- W (1 - lr wd) - lr 0.2 sqrt(max(m, n)) X. fp32.
"""
import argparse
import json
import math
import pathlib
import re
import sys

import torch
import transformers

A, B, C = 3.4445, -4.7750, 2.0315


def orthogonalise(u, steps):
    x = u / (u.norm() + 1e-7)
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = x.T
    for _ in range(steps):
        a = x @ x.T
        x = A * x + (B * a + C * a @ a) @ x
    return x.T if tall else x


def logical_matrices(name, weight, conv1d):
    """The logical (out x in) matrices of a block weight, as functions that read them and write an update."""
    if conv1d:  # GPT-2: weight is in x out; c_attn's columns are q | k | v
        blocks = 3 if name.endswith("attn.c_attn.weight") else 1
        width = weight.shape[1] // blocks
        return [(lambda t, i=i: t[:, i * width:(i + 1) * width].T, lambda t, x, i=i: t[:, i * width:(i + 1) * width].add_(x.T))
                for i in range(blocks)]
    return [(lambda t: t, lambda t, x: t.add_(x))]


class Muon:
    def __init__(self, named, lr_scale, weight_decay, momentum, nesterov, ns_steps, conv1d):
        self.named, self.lr_scale, self.wd = named, lr_scale, weight_decay
        self.mu, self.nesterov, self.ns_steps, self.conv1d = momentum, nesterov, ns_steps, conv1d
        self.buffers = {name: torch.zeros_like(p) for name, p in named}

    @torch.no_grad()
    def step(self, lr):
        lr = lr * self.lr_scale
        for name, p in self.named:
            g = p.grad
            buf = self.buffers[name]
            buf.mul_(self.mu).add_(g)
            u = g + self.mu * buf if self.nesterov else buf
            update = torch.zeros_like(p)
            for read, write in logical_matrices(name, p, self.conv1d):
                matrix = read(u)
                rows, cols = matrix.shape
                write(update, orthogonalise(matrix, self.ns_steps) * (0.2 * math.sqrt(max(rows, cols))))
            p.mul_(1 - lr * self.wd)
            p.add_(update, alpha=-lr)


def schedule(step, lr, min_lr, warmup, total):
    """loom's warm-up + cosine (optim/lr_schedule.cpp) at 0-based STEP."""
    if step < warmup:
        return lr * (step + 1) / warmup
    span = max(1, total - warmup - 1)
    progress = min(max((step - warmup) / span, 0.0), 1.0)
    return min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * progress))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("dir")
    parser.add_argument("text")
    parser.add_argument("run")
    for flag, kind, default in (("--seq-len", int, 32), ("--sequences", int, 8), ("--steps", int, 20),
                                ("--lr", float, 3e-3), ("--min-lr", float, 3e-4), ("--warmup", int, 2),
                                ("--weight-decay", float, 0.1), ("--muon-lr", float, 0.0),
                                ("--muon-weight-decay", float, -1.0), ("--momentum", float, 0.95),
                                ("--ns-steps", int, 5), ("--grad-clip", float, 1.0)):
        parser.add_argument(flag, type=kind, default=default)
    parser.add_argument("--no-nesterov", action="store_true")
    # The groups as loom's train.muon.include / exclude make them, as regexes on Hugging Face's names.
    parser.add_argument("--include-re", default="")
    parser.add_argument("--exclude-re", default="")
    args = parser.parse_args()
    torch.set_num_threads(1)
    transformers.utils.logging.set_verbosity_error()
    model = transformers.AutoModelForCausalLM.from_pretrained(args.dir, dtype=torch.float32)
    model.train()
    conv1d = model.config.model_type == "gpt2"
    block = re.compile(r"^(transformer\.h|model\.layers)\.\d+\.")
    muon_named, decayed, plain = [], [], []
    include = re.compile(args.include_re) if args.include_re else None
    exclude = re.compile(args.exclude_re) if args.exclude_re else None
    for name, p in model.named_parameters():  # a tied lm_head is wte: listed once
        by_muon = (block.match(name) and p.dim() == 2) or bool(include and include.search(name))
        if exclude and exclude.search(name):
            by_muon = False
        if by_muon:
            muon_named.append((name, p))
        elif p.dim() >= 2:
            decayed.append(p)
        else:
            plain.append(p)
    adamw = torch.optim.AdamW([{"params": decayed, "weight_decay": args.weight_decay},
                               {"params": plain, "weight_decay": 0.0}],
                              lr=args.lr, betas=(0.9, 0.95), eps=1e-8, foreach=False)
    muon = Muon(muon_named, args.muon_lr / args.lr if args.muon_lr > 0 else 1.0,
                args.muon_weight_decay if args.muon_weight_decay >= 0 else args.weight_decay, args.momentum,
                not args.no_nesterov, args.ns_steps, conv1d)
    tokens = torch.tensor(list(pathlib.Path(args.text).read_bytes()), dtype=torch.long)
    s, g = args.seq_len, args.sequences
    rows = {r["step"]: r["loss"] for r in map(json.loads, open(pathlib.Path(args.run) / "metrics.jsonl"))
            if "loss" in r and r.get("step")}
    worst = 0.0
    for step in range(args.steps):
        first = step * g
        x = torch.stack([tokens[(first + i) * s:(first + i) * s + s] for i in range(g)])
        y = torch.stack([tokens[(first + i) * s + 1:(first + i) * s + s + 1] for i in range(g)])
        logits = model(input_ids=x).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        adamw.zero_grad(set_to_none=False)
        for _, p in muon_named:
            p.grad = None
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        lr = schedule(step, args.lr, args.min_lr, args.warmup, args.steps)
        for group in adamw.param_groups:
            group["lr"] = lr
        adamw.step()
        muon.step(lr)
        mine, theirs = loss.item(), rows.get(step + 1)
        if theirs is None:
            sys.exit(f"{args.run}: no loss at step {step + 1}")
        difference = abs(mine - theirs)
        worst = max(worst, difference / max(1.0, abs(mine)))
        if not difference <= 1e-5 * max(1.0, abs(mine)):
            sys.exit(f"{args.run}: step {step + 1}: loom's loss {theirs:.8f}, the reference's {mine:.8f} "
                     f"(difference {difference:.3e})")
    print(f"{args.run}: {args.steps} steps within {worst:.2e} of the plain PyTorch Muon "
          f"(last loss {mine:.6f})")


if __name__ == "__main__":
    main()
