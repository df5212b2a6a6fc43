"""An independent forward of a Hugging Face model directory (GPT2LMHeadModel or
LlamaForCausalLM, fp32), written from Hugging Face's conventions and reading the
safetensors by their specification, for checking `loom generate`.

    reference_forward.py greedy HF_DIR --prompt TEXT --max-new-tokens N

prints the greedy continuation's ids as a JSON list: each step recomputes the whole
sequence (no cache) and takes the argmax of the last position's logits. The prompt's
ids are its UTF-8 bytes (loom's byte tokenizer). The smallest gap between the best and
second-best logit along the chain goes to stderr: a near tie would make a comparison
fragile, and the gap says how far from one the test is.
"""
import argparse
import json
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


def read_safetensors(path):
    """u64 little-endian header length, a JSON header, then the tensors' bytes."""
    with open(path, "rb") as f:
        data = f.read()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    base = 8 + length
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = bytearray(data[base + begin:base + end])
        tensor = torch.frombuffer(raw, dtype=DTYPES[info["dtype"]]) if raw else torch.empty(0)
        tensors[name] = tensor.reshape(info["shape"]).float()
    return tensors


def read_model_dir(d):
    config = json.load(open(os.path.join(d, "config.json")))
    index = os.path.join(d, "model.safetensors.index.json")
    if not os.path.exists(index):
        return config, read_safetensors(os.path.join(d, "model.safetensors"))
    weights = {}
    for file in sorted(set(json.load(open(index))["weight_map"].values())):
        weights.update(read_safetensors(os.path.join(d, file)))
    return config, weights


def causal_attention(q, k, v):
    """q [heads, S, d], k and v [heads, S, d] -> [S, heads * d]."""
    s, d = q.shape[1], q.shape[2]
    scores = q @ k.transpose(-1, -2) / math.sqrt(d)
    scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
    return (scores.softmax(-1) @ v).transpose(0, 1).reshape(s, -1)


def gpt2_logits(c, w, ids):
    """GPT2LMHeadModel: Conv1D weights [in, out], pre-LayerNorm blocks, gelu_new, lm_head tied to wte."""
    def p(name):
        return w[name] if name in w else w["transformer." + name]

    heads, eps = c["n_head"], c.get("layer_norm_epsilon", 1e-5)
    x = p("wte.weight")[ids] + p("wpe.weight")[: len(ids)]
    hidden = x.shape[-1]
    ln = lambda t, n: F.layer_norm(t, (hidden,), p(n + ".weight"), p(n + ".bias"), eps)
    for i in range(c["n_layer"]):
        h = f"h.{i}."
        qkv = ln(x, h + "ln_1") @ p(h + "attn.c_attn.weight") + p(h + "attn.c_attn.bias")
        q, k, v = (t.view(len(ids), heads, -1).transpose(0, 1) for t in qkv.split(hidden, -1))
        x = x + causal_attention(q, k, v) @ p(h + "attn.c_proj.weight") + p(h + "attn.c_proj.bias")
        m = ln(x, h + "ln_2") @ p(h + "mlp.c_fc.weight") + p(h + "mlp.c_fc.bias")
        x = x + F.gelu(m, approximate="tanh") @ p(h + "mlp.c_proj.weight") + p(h + "mlp.c_proj.bias")
    return ln(x, "ln_f") @ p("wte.weight").t()


def rotate_half(t):
    a, b = t.chunk(2, -1)
    return torch.cat((-b, a), -1)


def llama_logits(c, w, ids):
    """LlamaForCausalLM: RMSNorm, q/k/v/o projections, rotate-half RoPE, grouped kv heads, SwiGLU."""
    assert c.get("rope_scaling") is None, "this reference has no rope scaling"
    heads, kv_heads = c["num_attention_heads"], c.get("num_key_value_heads", c["num_attention_heads"])
    hidden, eps, theta = c["hidden_size"], c.get("rms_norm_eps", 1e-6), c.get("rope_theta", 10000.0)
    d, s = hidden // heads, len(ids)
    inv_freq = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d)
    angles = torch.outer(torch.arange(s).float(), inv_freq)
    cos, sin = torch.cat((angles, angles), -1).cos(), torch.cat((angles, angles), -1).sin()

    def rms(t, name):
        return w[name] * (t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + eps))

    def linear(t, name):
        out = t @ w[name + ".weight"].t()
        return out + w[name + ".bias"] if name + ".bias" in w else out

    x = w["model.embed_tokens.weight"][ids]
    for i in range(c["num_hidden_layers"]):
        h = f"model.layers.{i}."
        y = rms(x, h + "input_layernorm.weight")
        q = linear(y, h + "self_attn.q_proj").view(s, heads, d).transpose(0, 1)
        k = linear(y, h + "self_attn.k_proj").view(s, kv_heads, d).transpose(0, 1)
        v = linear(y, h + "self_attn.v_proj").view(s, kv_heads, d).transpose(0, 1)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        # Query head j reads kv head j // (heads / kv_heads), as transformers' repeat_kv lays them.
        k, v = k.repeat_interleave(heads // kv_heads, 0), v.repeat_interleave(heads // kv_heads, 0)
        x = x + linear(causal_attention(q, k, v), h + "self_attn.o_proj")
        y = rms(x, h + "post_attention_layernorm.weight")
        x = x + linear(F.silu(linear(y, h + "mlp.gate_proj")) * linear(y, h + "mlp.up_proj"), h + "mlp.down_proj")
    head = w["lm_head.weight"] if "lm_head.weight" in w else w["model.embed_tokens.weight"]
    return rms(x, "model.norm.weight") @ head.t()


def greedy(args):
    config, weights = read_model_dir(args.model)
    arch = config["architectures"][0]
    logits_of = gpt2_logits if arch == "GPT2LMHeadModel" else llama_logits
    ids = list(args.prompt.encode("utf-8"))
    new, smallest_gap = [], float("inf")
    with torch.no_grad():
        for _ in range(args.max_new_tokens):
            last = logits_of(config, weights, torch.tensor(ids))[-1]
            top = last.topk(2).values
            smallest_gap = min(smallest_gap, (top[0] - top[1]).item())
            ids.append(int(last.argmax()))
            new.append(ids[-1])
    print(f"reference {arch}: smallest gap between the best two logits {smallest_gap:.4g}", file=sys.stderr)
    print(json.dumps(new, separators=(",", ":")))


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("greedy")
    g.add_argument("model")
    g.add_argument("--prompt", required=True)
    g.add_argument("--max-new-tokens", type=int, required=True)
    args = parser.parse_args()
    greedy(args)


if __name__ == "__main__":
    main()
