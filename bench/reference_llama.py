"""The PyTorch side of loom's Llama benchmark: bench/llama_bench.yaml's model
written as Hugging Face's modeling_llama writes it (RMSNorm in fp32, separate
q/k/v/o projections without biases, rotate-half rotary embeddings from an
inv_freq table, repeat_kv for grouped-query attention, down(silu(gate) * up),
an untied lm_head, or with --tie-embeddings the embedding's as Llama 3.2 1B does;
with --experts a mixture of SwiGLU experts in every block, as its eager Mixtral and
Qwen3-MoE blocks loop over them;
attention through scaled_dot_product_attention after repeat_kv, as its "sdpa"
path does), trained by the same loop as bench/reference_gpt.py: the same AdamW
groups, clipping, schedule, threads, --compile and result line.
"""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from reference_gpt import add_training_arguments, train


class RMSNorm(nn.Module):
    def __init__(self, hidden, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def repeat_kv(x, n_rep):
    """[B, kv_heads, S, d] -> [B, kv_heads * n_rep, S, d]: each kv head serves n_rep consecutive query heads."""
    b, kv, s, d = x.shape
    return x if n_rep == 1 else x[:, :, None].expand(b, kv, n_rep, s, d).reshape(b, kv * n_rep, s, d)


class Attention(nn.Module):
    def __init__(self, hidden, heads, kv_heads, seq_len, fused_attention):
        super().__init__()
        self.heads, self.kv_heads, self.d = heads, kv_heads, hidden // heads
        self.fused_attention = fused_attention
        self.q_proj = nn.Linear(hidden, heads * self.d, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * self.d, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * self.d, bias=False)
        self.o_proj = nn.Linear(heads * self.d, hidden, bias=False)
        # Plain attributes, not buffers: DDP would broadcast buffers, and gloo has no bool.
        self.mask = torch.ones(seq_len, seq_len, dtype=torch.bool).triu(1)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.heads, self.d).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.kv_heads, self.d).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.kv_heads, self.d).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        n_rep = self.heads // self.kv_heads
        k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)
        if self.fused_attention:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.d)
            scores = scores.masked_fill(self.mask[:s, :s].to(x.device), float("-inf"))
            out = scores.softmax(-1, dtype=torch.float32).to(q.dtype) @ v
        return self.o_proj(out.transpose(1, 2).reshape(b, s, self.heads * self.d))


class MLP(nn.Module):
    def __init__(self, hidden, ffn):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, ffn, bias=False)
        self.up_proj = nn.Linear(hidden, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class SparseMoE(nn.Module):
    """A mixture of SwiGLU experts as Hugging Face's eager Mixtral / Qwen3-MoE blocks run it: a
    bias-free router, softmax in fp32, the top k (renormalised with norm_topk_prob), then a loop
    over the experts that got tokens, each gathering its rows and adding its weighted output back
    with index_add_. The Switch load-balancing loss (E * sum_e f_e P_e) is added to the model's
    loss times aux_coeff, as loom's aux_loss_coeff does."""

    def __init__(self, hidden, experts, top_k, ffn, aux_coeff):
        super().__init__()
        self.top_k, self.aux_coeff = top_k, aux_coeff
        self.gate = nn.Linear(hidden, experts, bias=False)
        self.experts = nn.ModuleList(MLP(hidden, ffn) for _ in range(experts))
        self.aux_loss = None

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        probs = F.softmax(self.gate(x), dim=-1, dtype=torch.float32)
        weights, chosen = probs.topk(self.top_k, dim=-1)
        weights = (weights / weights.sum(-1, keepdim=True)).to(x.dtype)
        out = torch.zeros_like(x)
        # [E, k, T]: which token chose expert e as its j-th choice.
        mask = F.one_hot(chosen, len(self.experts)).permute(2, 1, 0)
        for e in (mask.sum(dim=(1, 2)) > 0).nonzero().flatten().tolist():
            slot, token = torch.where(mask[e])
            y = self.experts[e](x[token]) * weights[token, slot, None]
            out.index_add_(0, token, y.to(x.dtype))
        fraction = mask.sum(1).float().mean(-1) / self.top_k  # f_e: the share of choices of expert e
        self.aux_loss = len(self.experts) * (fraction * probs.mean(0)).sum() * self.aux_coeff
        return out.view(shape)


class Block(nn.Module):
    def __init__(self, hidden, heads, kv_heads, ffn, seq_len, eps, fused_attention, moe=None):
        super().__init__()
        self.input_layernorm = RMSNorm(hidden, eps)
        self.self_attn = Attention(hidden, heads, kv_heads, seq_len, fused_attention)
        self.post_attention_layernorm = RMSNorm(hidden, eps)
        self.mlp = SparseMoE(hidden, **moe) if moe else MLP(hidden, ffn)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    def __init__(self, vocab, seq_len, hidden, heads, kv_heads, ffn, layers, theta, eps, fused_attention=False,
                 tie_embeddings=False, moe=None):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList(
            Block(hidden, heads, kv_heads, ffn, seq_len, eps, fused_attention, moe) for _ in range(layers))
        self.norm = RMSNorm(hidden, eps)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)
        d = hidden // heads
        inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
        freqs = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.cos, self.sin = emb.cos(), emb.sin()  # [S, d], plain attributes as the mask
        for p in self.parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, std=0.02)
        if tie_embeddings:
            self.lm_head.weight = self.embed_tokens.weight

    def forward(self, tokens, targets):
        s = tokens.size(1)
        x = self.embed_tokens(tokens)
        cos, sin = self.cos[:s].to(x.device, x.dtype), self.sin[:s].to(x.device, x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin)
        logits = self.lm_head(self.norm(x))
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))
        for layer in self.layers:
            if isinstance(layer.mlp, SparseMoE):
                loss = loss + layer.mlp.aux_loss
        return loss


def main():
    parser = argparse.ArgumentParser()
    add_training_arguments(parser)
    parser.add_argument("--kv-heads", type=int, default=3)
    parser.add_argument("--ffn", type=int, default=1024)
    parser.add_argument("--rope-theta", type=float, default=10000.0)
    parser.add_argument("--tie-embeddings", action="store_true", help="the output layer shares the embedding")
    parser.add_argument("--experts", type=int, default=0, help="a mixture of this many SwiGLU experts in every block")
    parser.add_argument("--top-k", type=int, default=2)
    parser.add_argument("--moe-ffn", type=int, default=0, help="each expert's width (default: --ffn)")
    parser.add_argument("--aux-loss-coeff", type=float, default=0.0)
    args = parser.parse_args()
    moe = (dict(experts=args.experts, top_k=args.top_k, ffn=args.moe_ffn or args.ffn, aux_coeff=args.aux_loss_coeff)
           if args.experts else None)
    train(args, lambda fused_attention: Llama(args.vocab, args.seq_len, args.hidden, args.heads, args.kv_heads,
                                              args.ffn, args.layers, args.rope_theta, args.norm_eps, fused_attention,
                                              args.tie_embeddings, moe))


if __name__ == "__main__":
    main()
