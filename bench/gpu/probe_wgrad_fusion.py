"""Probe for the weight gradient written into its fp32 master gradient by the product itself
(Megatron-LM's gradient-accumulation fusion), on a GPU: for the 1B Llama's weight shapes at a
micro-batch of 4 x 2048 tokens, the time of the bf16 product dY^T X (what loom runs now, followed
by its fp32 += bf16 kernel) against ATen's addmm with an fp32 output accumulating into the master
gradient in place (beta 1: aten::addmm.dtype_out). Prints both times per shape and the largest
difference of the fused sum from the product's fp32 sum. Run on the GPU machine:
    python3 bench/gpu/probe_wgrad_fusion.py
"""
import torch

tokens = 4 * 2048
shapes = {"q/o": (2048, 2048), "k/v": (512, 2048), "gate/up": (8192, 2048), "down": (2048, 8192),
          "experts (768 x 2048, 1024 rows)": (768, 2048)}
dev = "cuda"


def timed(fn, reps=20):
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


print(torch.__version__, torch.cuda.get_device_name())
for name, (out_f, in_f) in shapes.items():
    rows = 1024 if "experts" in name else tokens
    dy_t = torch.randn(out_f, rows, device=dev, dtype=torch.bfloat16)
    x = torch.randn(rows, in_f, device=dev, dtype=torch.bfloat16)
    master = torch.randn(out_f, in_f, device=dev)
    g = torch.empty(out_f, in_f, device=dev, dtype=torch.bfloat16)
    t_mm = timed(lambda: torch.mm(dy_t, x, out=g))
    # fp32 += bf16 as a plain bandwidth-bound pass (loom's kernel runs near it): the bf16 gradient read, the master read and written.
    t_add = timed(lambda: master.add_(g))
    fused = master.clone()
    t_fused = timed(lambda: torch.addmm(fused, dy_t, x, out_dtype=torch.float32, beta=1, out=fused))
    check = master.clone()
    torch.addmm(check, dy_t, x, out_dtype=torch.float32, beta=1, out=check)
    want = master + torch.mm(dy_t.float(), x.float())
    err = ((check - want).abs().max() / want.abs().max()).item()
    print(f"{name:34s} bf16 product {t_mm:7.3f} ms | + add_ {t_add:6.3f} ms | fused fp32 addmm {t_fused:7.3f} ms"
          f" | fused / (product + add) {t_fused / (t_mm + t_add):.3f} | relative error {err:.2e}")
