"""DeepSeek-V3's multi-token prediction, computed with transformers' own DeepSeek-V3 layers, as the
reference for loom's (models/mtp.h).

    deepseek_mtp.py EXPORT TEXT RUN... --seq-len S --sequences G

EXPORT is a `loom export --format hf` of a DeepSeek-V3 trained with model.mtp.depth D: its modules
are the layers num_hidden_layers .. + D - 1 in the release's names (a decoder layer's tensors, enorm,
hnorm, eh_proj, shared_head.norm, and copies of embed_tokens and shared_head.head). transformers loads
the main model (the MTP layers are its only unexpected keys); module k (1-based) is built from
transformers' DeepseekV3DecoderLayer and RMSNorm with the exported tensors, and at position i takes
hnorm(previous hidden state: the main model's final normed one for k = 1) and enorm(embedding of token
i + k), eh_proj of the two (embedding first), the layer, shared_head.norm and shared_head.head, and
predicts token i + k + 1. The reference mtp_loss is the mean over the modules of each one's mean
cross-entropy on the first batch (G sequences of S + 1 bytes of TEXT), and each RUN's step-1 mtp_loss
(metrics.jsonl) must equal it within 1e-5 x max(1, |loss|), its loss the main model's.
"""
import argparse
import json
import pathlib
import sys

import safetensors.torch
import torch
import transformers
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as ds


def tensors_of(directory):
    out = {}
    for file in sorted(pathlib.Path(directory).glob("*.safetensors")):
        out.update(safetensors.torch.load_file(str(file)))
    return out


def rms_norm(config, weight):
    norm = ds.DeepseekV3RMSNorm(weight.shape[0], eps=config.rms_norm_eps)
    norm.weight.data.copy_(weight)
    return norm


def decoder_layer(config, index, tensors):
    """transformers' layer INDEX with the export's tensors (the experts stacked as it holds them)."""
    layer = ds.DeepseekV3DecoderLayer(config, index)
    prefix = f"model.layers.{index}."
    state = {}
    for name, tensor in tensors.items():
        if name.startswith(prefix):
            state[name[len(prefix):]] = tensor
    own = {}
    experts = config.n_routed_experts
    for name in layer.state_dict():
        if name == "mlp.experts.gate_up_proj":
            own[name] = torch.stack([torch.cat([state[f"mlp.experts.{e}.gate_proj.weight"],
                                                state[f"mlp.experts.{e}.up_proj.weight"]]) for e in range(experts)])
        elif name == "mlp.experts.down_proj":
            own[name] = torch.stack([state[f"mlp.experts.{e}.down_proj.weight"] for e in range(experts)])
        else:
            own[name] = state[name]
    layer.load_state_dict(own)
    layer.eval()
    return layer


def main():
    transformers.utils.logging.set_verbosity_error()
    parser = argparse.ArgumentParser()
    parser.add_argument("export")
    parser.add_argument("text")
    parser.add_argument("run", nargs="*")
    parser.add_argument("--seq-len", type=int, required=True)
    parser.add_argument("--sequences", type=int, required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)

    model, info = transformers.AutoModelForCausalLM.from_pretrained(args.export, dtype=torch.float32,
                                                                   output_loading_info=True)
    model.eval()
    config = model.config
    depth, first = config.num_nextn_predict_layers, config.num_hidden_layers
    if depth < 1:
        sys.exit(f"{args.export}: num_nextn_predict_layers is {depth}: no multi-token prediction layers")
    mtp_names = tuple(f"model.layers.{first + k}." for k in range(depth))
    stray = [k for k in info["unexpected_keys"] if not k.startswith(mtp_names)]
    if info["missing_keys"] or info["mismatched_keys"] or stray:
        sys.exit(f"{args.export}: from_pretrained reports missing {info['missing_keys']}, mismatched "
                 f"{info['mismatched_keys']}, unexpected beyond the MTP layers {stray}")
    tensors = tensors_of(args.export)
    for k in range(depth):  # the release's copies of the shared embedding and output layer
        p = f"model.layers.{first + k}."
        if not torch.equal(tensors[p + "embed_tokens.weight"], tensors["model.embed_tokens.weight"]):
            sys.exit(f"{args.export}: {p}embed_tokens.weight is not the model's embedding")
        if not torch.equal(tensors[p + "shared_head.head.weight"], model.lm_head.weight.detach()):
            sys.exit(f"{args.export}: {p}shared_head.head.weight is not the model's output layer")

    data = torch.tensor(list(pathlib.Path(args.text).read_bytes()), dtype=torch.long)
    s = args.seq_len
    x = torch.stack([data[i * s:i * s + s] for i in range(args.sequences)])
    y = torch.stack([data[i * s + 1:i * s + s + 1] for i in range(args.sequences)])
    with torch.no_grad():
        out = model.model(input_ids=x)
        hidden = out.last_hidden_state  # after the final norm
        logits = model.lm_head(hidden)
        main_loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).double(), y.reshape(-1))
        losses = []
        for k in range(1, depth + 1):
            p = f"model.layers.{first + k - 1}."
            n = s - k  # the positions with a token i + k + 1
            embedded = model.model.embed_tokens(y[:, k - 1:k - 1 + n])  # token i + k
            joined = torch.cat([rms_norm(config, tensors[p + "enorm.weight"])(embedded),
                                rms_norm(config, tensors[p + "hnorm.weight"])(hidden[:, :n])], -1)
            h = torch.nn.functional.linear(joined, tensors[p + "eh_proj.weight"])
            positions = torch.arange(n).unsqueeze(0)
            h = decoder_layer(config, first + k - 1, tensors)(
                h, position_embeddings=model.model.rotary_emb(h, positions), position_ids=positions)
            h = h[0] if isinstance(h, tuple) else h
            head = torch.nn.functional.linear(rms_norm(config, tensors[p + "shared_head.norm.weight"])(h),
                                              tensors[p + "shared_head.head.weight"])
            losses.append(torch.nn.functional.cross_entropy(head.reshape(-1, head.shape[-1]).double(),
                                                            y[:, k:k + n].reshape(-1)))
            hidden = h
        reference = torch.stack(losses).mean().item()
    print(f"{args.export}: transformers' layers give loss {main_loss.item():.8f}, mtp_loss {reference:.8f} "
          f"over {depth} module(s)")
    for run in args.run:
        rows = [json.loads(line) for line in open(pathlib.Path(run) / "metrics.jsonl")]
        row = next(r for r in rows if r.get("step") == 1 and "loss" in r)
        for key, want in (("loss", main_loss.item()), ("mtp_loss", reference)):
            got = row.get(key)
            print(f"{run}: {key} loom {got} transformers {want:.8f}")
            if got is None or not abs(got - want) <= 1e-5 * max(1.0, abs(want)):
                sys.exit(f"{run}: step 1's {key} {got} differs from transformers' {want}")


main()
