"""A Qwen3-MoE-shaped model trained on the CPU by loom and by transformers' own Qwen3MoeForCausalLM
(PyTorch 2.x eager, the same wheel), side by side: tokens/s of each (median after the warm-up steps)
and their ratio. The same shape, batch, AdamW and auxiliary loss on both; random tokens (speed does
not depend on the text). Not a test: run it on a quiet machine.

  .venv/bin/python bench/moe_vs_transformers.py [--steps 12] [--warmup-steps 3] [--threads 2]
      [--layers 8] [--hidden 256] [--experts 32] [--top-k 4] [--expert-width 128] [--seq 256] [--batch 8]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def transformers_rate(a):
    import torch
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    config = Qwen3MoeConfig(vocab_size=256, hidden_size=a.hidden, intermediate_size=4 * a.hidden,
                            moe_intermediate_size=a.expert_width, num_hidden_layers=a.layers,
                            num_attention_heads=a.hidden // 64, num_key_value_heads=max(1, a.hidden // 128),
                            head_dim=64, num_experts=a.experts, num_experts_per_tok=a.top_k, norm_topk_prob=True,
                            max_position_embeddings=a.seq, rope_theta=10000.0, rms_norm_eps=1e-6,
                            router_aux_loss_coef=0.001, output_router_logits=True, tie_word_embeddings=False,
                            attention_dropout=0.0, decoder_sparse_step=1, mlp_only_layers=[])
    config._attn_implementation = "sdpa"
    model = Qwen3MoeForCausalLM(config).train()
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    rest = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
    rates = []
    for step in range(a.steps):
        ids = torch.randint(0, 256, (a.batch, a.seq + 1))
        start = time.perf_counter()
        out = model(input_ids=ids[:, :-1], labels=ids[:, 1:].contiguous())
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        rates.append(a.batch * a.seq / (time.perf_counter() - start))
    return statistics.median(rates[a.warmup_steps:])


def loom_rate(a, work):
    sets = {"model.num_layers": a.layers, "model.hidden_size": a.hidden, "model.num_heads": a.hidden // 64,
            "model.num_kv_heads": max(1, a.hidden // 128), "model.head_dim": 64, "model.qk_norm": "true",
            "model.ffn_hidden_size": 4 * a.hidden, "model.seq_len": a.seq, "model.norm_eps": 1e-6,
            "model.moe.num_experts": a.experts, "model.moe.top_k": a.top_k,
            "model.moe.moe_intermediate_size": a.expert_width, "model.moe.norm_topk_prob": "true",
            "model.moe.aux_loss_coeff": 0.001, "model.moe.z_loss_coeff": 0.0,
            "train.global_batch_size": a.batch, "train.micro_batch_size": a.batch, "train.steps": a.steps,
            "train.warmup_steps": 1, "train.threads_per_rank": a.threads, "log.interval": 1}
    run_dir = os.path.join(work, "loom")
    cmd = [os.path.join(ROOT, "build", "loom"), "train", os.path.join(ROOT, "bench", "llama_bench.yaml"),
           "--run-dir", run_dir]
    for k, v in sets.items():
        cmd += ["--set", f"{k}={v}"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    records = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    rates = [r["tokens_per_s"] for r in records if "tokens_per_s" in r]
    return statistics.median(rates[a.warmup_steps:]), " ".join(cmd)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, default in [("steps", 12), ("warmup-steps", 3), ("threads", 2), ("layers", 8), ("hidden", 256),
                          ("experts", 32), ("top-k", 4), ("expert-width", 128), ("seq", 256), ("batch", 8)]:
        p.add_argument("--" + name, type=int, default=default)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as work:
        loom, command = loom_rate(a, work)
    hf = transformers_rate(a)
    result = {"shape": vars(a), "loom_tokens_per_s": round(loom, 1), "transformers_tokens_per_s": round(hf, 1),
              "loom_over_transformers": round(loom / hf, 3), "loom_command": command}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    sys.exit(main())
