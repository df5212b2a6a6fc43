#!/usr/bin/env bash
# Hugging Face interop: `loom export --format hf-gpt2` writes valid safetensors
# (parsed here independently of loom's writer) with GPT-2's names and Conv1D
# layouts; a plain PyTorch GPT-2 forward written from Hugging Face's
# conventions, fed that file, gives loom's first loss; and export ->
# model.init_from (at another layout) -> export gives identical tensors.
source "$(dirname "$0")/common.sh"
PY=/usr/bin/python3  # Debian's python3-torch
cat "$LOOM_SOURCE/README.md" "$LOOM_SOURCE/CMakeLists.txt" > "$WORK/text.txt"
"$LOOM" prepare --input "$WORK/text.txt" --output "$WORK/ds" > /dev/null || fail "prepare"
BASE=(--set model.num_layers=2 --set model.vocab_size=256 --set data.path="$WORK/ds" --set model.dropout=0)

mpirun --oversubscribe -np 4 "$LOOM" train "$TINY" --run-dir "$WORK/a" "${BASE[@]}" --set parallel.tp=2 --set parallel.pp=2 \
  --set checkpoint.dir="$WORK/ck_a" --set train.exit_after=5 > "$WORK/a.log" 2>&1 || { cat "$WORK/a.log"; fail "run a"; }
"$LOOM" export "$WORK/ck_a/step_00000005" --format hf-gpt2 --output "$WORK/a.safetensors" || fail "export a"

# From a's export, at tp=2 pp=1: the initial state saved (exit_after 0) and exported again.
mpirun --oversubscribe -np 2 "$LOOM" train "$TINY" --run-dir "$WORK/b" "${BASE[@]}" --set parallel.tp=2 \
  --set model.init_from="$WORK/a.safetensors" --set checkpoint.dir="$WORK/ck_b" --set train.exit_after=0 \
  > "$WORK/b.log" 2>&1 || { cat "$WORK/b.log"; fail "run b"; }
"$LOOM" export "$WORK/ck_b/step_00000000" --format hf-gpt2 --output "$WORK/b.safetensors" || fail "export b"

# One step from a's export at tp=2 pp=2: its loss is the first batch's under a's weights.
mpirun --oversubscribe -np 4 "$LOOM" train "$TINY" --run-dir "$WORK/c" "${BASE[@]}" --set parallel.tp=2 --set parallel.pp=2 \
  --set model.init_from="$WORK/a.safetensors" --set train.steps=1 --set train.warmup_steps=0 \
  > "$WORK/c.log" 2>&1 || { cat "$WORK/c.log"; fail "run c"; }

"$PY" - "$WORK" << 'PY' || fail "safetensors / Hugging Face layout check"
import json, math, struct, sys
import torch
work = sys.argv[1]

def read(path):
    """safetensors by its specification: u64 header length, JSON header, then the data."""
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    meta = header.pop("__metadata__", {})
    end = 0
    tensors = {}
    for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        begin, stop = info["data_offsets"]
        assert begin == end, f"{name}: hole or overlap in the data at {begin}"
        assert info["dtype"] == "F32"
        count = math.prod(info["shape"])
        assert stop - begin == 4 * count, name
        tensors[name] = torch.frombuffer(bytearray(raw[8 + n + begin : 8 + n + stop]), dtype=torch.float32).reshape(info["shape"])
        end = stop
    assert 8 + n + end == len(raw), "trailing bytes"
    return tensors, meta

a, meta = read(f"{work}/a.safetensors")
b, _ = read(f"{work}/b.safetensors")
assert meta.get("format") == "pt", meta
L, H, V, S, heads = 2, 32, 256, 32, 4
expect = {"wte.weight": [V, H], "wpe.weight": [S, H], "ln_f.weight": [H], "ln_f.bias": [H]}
for i in range(L):
    h = f"h.{i}."
    expect.update({h + "ln_1.weight": [H], h + "ln_1.bias": [H], h + "ln_2.weight": [H], h + "ln_2.bias": [H],
                   h + "attn.c_attn.weight": [H, 3 * H], h + "attn.c_attn.bias": [3 * H],
                   h + "attn.c_proj.weight": [H, H], h + "attn.c_proj.bias": [H],
                   h + "mlp.c_fc.weight": [H, 4 * H], h + "mlp.c_fc.bias": [4 * H],
                   h + "mlp.c_proj.weight": [4 * H, H], h + "mlp.c_proj.bias": [H]})
assert {k: list(v.shape) for k, v in a.items()} == expect, sorted(a)
assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), "export -> init_from -> export changed tensors"
print(f"safetensors valid: {len(a)} tensors in GPT-2 names and Conv1D shapes; the round trip is bit-identical")

# GPT-2's forward as Hugging Face computes it (Conv1D: x @ W + b; c_attn columns q | k | v).
tokens = torch.tensor(list(open(f"{work}/text.txt", "rb").read()), dtype=torch.long)
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
loom = json.loads(open(f"{work}/c/metrics.jsonl").readline())["loss"]
assert abs(loom - reference) <= 1e-5 * max(1, abs(reference)), (loom, reference)
print(f"Hugging Face-convention forward of the export: loss {reference:.6f}; loom from init_from at tp=2 pp=2: {loom:.6f}")
PY
echo "hf export: ok"
