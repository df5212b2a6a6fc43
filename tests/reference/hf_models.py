"""Hugging Face's `transformers` as the reference for the models loom reads and writes.

    hf_models.py make ARCH DIR [--sliding-window N]
        a tiny random ARCH (gpt2, llama, mistral, qwen2, qwen3, mixtral, qwen3_moe, deepseek_v3) saved with
        save_pretrained (fp32, safetensors). Every parameter is drawn at random (biases and norms included, and
        DeepSeek-V3's routers' e_score_correction_bias buffers), the Llama's rope_theta is not the default, so a
        dropped bias, norm or theta shows in the loss.
    hf_models.py loss DIR TEXT --seq-len S --sequences G
        transformers' mean next-token loss on the first G sequences of S + 1 of TEXT's bytes
        (loom's batch 1 on `loom prepare`'s byte dataset in sequential order), printed.
    hf_models.py compare-loss DIR TEXT [RUN...] --seq-len S --sequences G [--export EXPORT [--same-architecture]]
        that loss against each RUN's first loss (metrics.jsonl) within 1e-5 x max(1, |loss|);
        with --export, EXPORT (a loom export of DIR) loads with from_pretrained with no missing,
        unexpected or mismatched key and gives DIR's logits within 1e-5 on a fixed batch (one
        process for all: transformers imports slowly).
    hf_models.py greedy DIR... --prompt TEXT --max-new-tokens N [--out FILE]
        transformers' greedy generate from the prompt's UTF-8 bytes: the new ids as a JSON list, a
        line for each DIR (into FILE, if given).

Every command also runs inside tests/reference/batch.py, several in one process.
"""
import argparse
import json
import math
import pathlib
import sys

import torch
import transformers

SHAPE = dict(vocab_size=256, hidden=64, layers=2, heads=4, kv_heads=2, ffn=128, positions=64)


def make(args):
    torch.manual_seed(1234)
    s = SHAPE
    if args.arch == "gpt2":
        config = transformers.GPT2Config(vocab_size=s["vocab_size"], n_embd=s["hidden"], n_layer=s["layers"],
                                         n_head=s["heads"], n_positions=s["positions"], activation_function="gelu_new",
                                         resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        model = transformers.GPT2LMHeadModel(config)
    else:
        common = dict(vocab_size=s["vocab_size"], hidden_size=s["hidden"], num_hidden_layers=s["layers"],
                      num_attention_heads=s["heads"], num_key_value_heads=s["kv_heads"], intermediate_size=s["ffn"],
                      max_position_embeddings=s["positions"], rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2)
        if args.arch == "llama":
            config = transformers.LlamaConfig(**common, rope_theta=50000.0, tie_word_embeddings=False)
            model = transformers.LlamaForCausalLM(config)
        elif args.arch == "mistral":
            config = transformers.MistralConfig(**common, sliding_window=args.sliding_window, tie_word_embeddings=False)
            model = transformers.MistralForCausalLM(config)
        elif args.arch == "mixtral":
            # Four SwiGLU experts of intermediate_size in every block, the top two renormalised.
            config = transformers.MixtralConfig(**common, num_local_experts=4, num_experts_per_tok=2,
                                                sliding_window=None, rope_theta=30000.0, tie_word_embeddings=False)
            model = transformers.MixtralForCausalLM(config)
        elif args.arch == "qwen3":
            # Heads of 32 (not hidden / heads = 16) with q/k norms.
            config = transformers.Qwen3Config(**common, head_dim=32, rope_theta=40000.0, tie_word_embeddings=True)
            model = transformers.Qwen3ForCausalLM(config)
        elif args.arch == "qwen3_moe":
            # Block 0 dense (mlp_only_layers), block 1 four experts of 48, the top two not renormalised.
            config = transformers.Qwen3MoeConfig(**common, head_dim=32, num_experts=4, num_experts_per_tok=2,
                                                 moe_intermediate_size=48, norm_topk_prob=False, mlp_only_layers=[0],
                                                 rope_theta=40000.0, tie_word_embeddings=False)
            model = transformers.Qwen3MoeForCausalLM(config)
        elif args.arch == "deepseek_v3":
            # Four blocks, block 0 dense (first_k_dense_replace), blocks 1-3 eight experts of 32 in four groups (the
            # top two groups, then the top two experts, renormalised, x2.5) plus one shared expert; MLA attention
            # (q and kv LoRA, rope on 8 of each head's 24 query/key dims, interleaved; values of 20) under YaRN
            # rope scaling; no MTP module.
            config = transformers.DeepseekV3Config(
                **{**common, "num_hidden_layers": 4, "num_key_value_heads": 4}, first_k_dense_replace=1,
                n_routed_experts=8, moe_intermediate_size=32, num_experts_per_tok=2, n_group=4, topk_group=2,
                n_shared_experts=args.n_shared_experts, norm_topk_prob=True, routed_scaling_factor=2.5, q_lora_rank=48,
                kv_lora_rank=32,
                qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=20, rope_interleave=True, attention_bias=False,
                rope_parameters=dict(rope_type="yarn", rope_theta=30000.0, factor=4.0,
                                     original_max_position_embeddings=16, beta_fast=32, beta_slow=1, mscale=0.8,
                                     mscale_all_dim=1.0),
                num_mtp_layers=0, tie_word_embeddings=False)
            model = transformers.DeepseekV3ForCausalLM(config)
        elif args.arch == "qwen2":
            config = transformers.Qwen2Config(**common, rope_theta=20000.0, tie_word_embeddings=True)
            model = transformers.Qwen2ForCausalLM(config)
        else:
            sys.exit(f"unknown arch {args.arch}")
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and ("norm" in name or "ln_" in name) and name.endswith("weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(0.08 * torch.randn_like(p))
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):  # a buffer, saved: drawn so that a dropped bias shows
                b.copy_(0.05 * torch.randn_like(b))
    model.save_pretrained(args.dir)
    print(f"{args.arch}: {sum(p.numel() for p in model.parameters())} parameters in {args.dir}")


def load(directory):
    model = transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
    model.eval()
    return model


def first_batch(text, seq_len, sequences):
    tokens = torch.tensor(list(pathlib.Path(text).read_bytes()), dtype=torch.long)
    x = torch.stack([tokens[i * seq_len:i * seq_len + seq_len] for i in range(sequences)])
    y = torch.stack([tokens[i * seq_len + 1:i * seq_len + seq_len + 1] for i in range(sequences)])
    return x, y


def reference_loss(directory, text, seq_len, sequences):
    x, y = first_batch(text, seq_len, sequences)
    with torch.no_grad():
        logits = load(directory)(input_ids=x).logits
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).double(), y.reshape(-1)).item()


def loss(args):
    print(f"{reference_loss(args.dir, args.text, args.seq_len, args.sequences):.8f}")


def compare_loss(args):
    reference = reference_loss(args.dir, args.text, args.seq_len, args.sequences)
    for run in args.run:
        rows = [json.loads(line) for line in open(pathlib.Path(run) / "metrics.jsonl")]
        loom = next(r["loss"] for r in rows if r.get("step") == 1 and "loss" in r)
        difference = abs(loom - reference)
        print(f"{run}: transformers {reference:.8f} loom {loom:.8f} difference {difference:.2e}")
        if not difference <= 1e-5 * max(1.0, abs(reference)):
            sys.exit(f"{run}: loom's first loss {loom} differs from transformers' {reference} by {difference:.3e}")
    if args.export:
        check_export(args.export, args.dir, args.same_architecture)


# Fields an export keeps from the model it came from (GPT-2's n_positions is cut to the trained length).
KEPT = ("max_position_embeddings", "bos_token_id", "eos_token_id", "pad_token_id", "tie_word_embeddings",
        "sliding_window", "rope_parameters", "rope_theta", "vocab_size", "hidden_size", "num_key_value_heads",
        # transformers' own training settings, which loom neither reads nor models
        "attention_dropout", "resid_pdrop", "embd_pdrop", "attn_pdrop", "use_cache", "output_router_logits",
        "router_aux_loss_coef")


def check_export(directory, reference, same_architecture):
    model, info = transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32,
                                                                   output_loading_info=True)
    problems = {k: v for k, v in info.items() if v}
    if problems:
        sys.exit(f"{directory}: from_pretrained reports {problems}")
    source = transformers.AutoConfig.from_pretrained(reference).to_dict()
    exported = transformers.AutoConfig.from_pretrained(directory).to_dict()
    differ = {k: (source[k], exported.get(k)) for k in KEPT if k in source and exported.get(k) != source[k]}
    if same_architecture and exported["architectures"] != source["architectures"]:
        differ["architectures"] = (source["architectures"], exported["architectures"])
    if differ:
        sys.exit(f"{directory}: config fields differ from the source's (source, export): {differ}")
    mine = transformers.GenerationConfig.from_pretrained(directory).to_diff_dict()
    theirs = transformers.GenerationConfig.from_pretrained(reference).to_diff_dict()
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        if mine.get(key) != theirs.get(key):
            sys.exit(f"{directory}: generation_config.json's {key} is {mine.get(key)}, the source's {theirs.get(key)}")
    model.eval()
    x = torch.arange(2 * 24).reshape(2, 24) * 37 % SHAPE["vocab_size"]
    with torch.no_grad():
        mine, theirs = model(input_ids=x).logits, load(reference)(input_ids=x).logits
    difference = (mine - theirs).abs().max().item()
    print(f"{directory}: {type(model).__name__}, logits within {difference:.2e} of {reference}")
    if not difference <= 1e-5:
        sys.exit(f"{directory}: logits differ from {reference} by {difference:.3e}")


def greedy(args):
    lines = []
    for directory in args.dir:  # one line each, in one process: transformers imports slowly
        model = load(directory)
        ids = torch.tensor([list(args.prompt.encode("utf-8"))])
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=args.max_new_tokens,
                             do_sample=False, eos_token_id=None, pad_token_id=0)
        lines.append(json.dumps(out[0, ids.shape[1]:].tolist()))
    if args.out:
        pathlib.Path(args.out).write_text("".join(line + "\n" for line in lines))
    else:
        print("\n".join(lines))


def main():
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("make")
    p.add_argument("arch")
    p.add_argument("dir")
    p.add_argument("--sliding-window", type=int, default=None)
    p.add_argument("--n-shared-experts", type=int, default=1, help="deepseek_v3's (0: transformers' empty ones)")
    p.set_defaults(func=make)
    for name, fn in (("loss", loss), ("compare-loss", compare_loss)):
        p = sub.add_parser(name)
        p.add_argument("dir")
        p.add_argument("text")
        if name == "compare-loss":
            p.add_argument("run", nargs="*")
            p.add_argument("--export", help="also check this export of DIR through from_pretrained")
            p.add_argument("--same-architecture", action="store_true",
                           help="the export's architectures must be DIR's (loom export --format hf)")
        p.add_argument("--seq-len", type=int, required=True)
        p.add_argument("--sequences", type=int, required=True)
        p.set_defaults(func=fn)
    p = sub.add_parser("greedy")
    p.add_argument("dir", nargs="+")
    p.add_argument("--prompt", required=True)
    p.add_argument("--max-new-tokens", type=int, required=True)
    p.add_argument("--out", help="write the lines to this file instead of stdout")
    p.set_defaults(func=greedy)
    args = parser.parse_args()
    torch.set_num_threads(1)
    args.func(args)


main()
