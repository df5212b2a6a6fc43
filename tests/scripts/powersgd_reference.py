"""PyTorch's own PowerSGD hook (torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook) replaying
what loom's PowerSGD did (tests/test_gradient_sync_multirank.cpp's "[.powersgd_reference]" case,
written to DUMP/rankR_rP.pt): the same ranks' gradients step by step, the hook started from loom's
first Q, and each step's mean against loom's. The hook is called as DDP calls it, on a bucket whose
gradients are views of its buffer (a stand-in for DDP's GradBucket, which Python cannot build).

  python3 powersgd_reference.py DUMP RANKS
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.jit._pickle
import torch.multiprocessing as mp
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as hook

# As in the C++ case: (offset, shape) of each slot, 8 steps, PowerSGD from the third.
SLOTS = [(0, (12, 9)), (108, (7,)), (115, (5, 16)), (195, (10, 3, 2)), (255, (4,)), (259, (8, 6))]
STEPS, START = 8, 2
TOLERANCE = 1e-5  # of max(1, |loom's mean|)


class Bucket:
    """What the hook reads of DDP's GradBucket: one buffer and its gradients as views of it."""

    def __init__(self, buffer):
        self._buffer = buffer

    def buffer(self):
        return self._buffer

    def index(self):
        return 0

    def is_last(self):
        return True

    def gradients(self):
        return [self._buffer[o:o + torch.Size(s).numel()].view(s) for o, s in SLOTS]

    def parameters(self):
        return self.gradients()


def replay(rank, world, dump, result):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{dump}/store", rank=rank, world_size=world)
    worst = {}
    for p_rank in (1, 3):
        # LibTorch's pickle_save writes a list of tensors through build_tensorlist.
        with torch.serialization.safe_globals([torch.jit._pickle.build_tensorlist]):
            saved = torch.load(f"{dump}/rank{rank}_r{p_rank}.pt")
        first_q, steps = saved[:len(SLOTS)], saved[len(SLOTS):]
        # loom compresses every matrix and no vector: here the hook does too at min_compression_rate
        # 1 (an n x 1 "matrix" never passes, each of these matrices does). loom's epsilon in
        # Gram-Schmidt; no batching by shape: the bucket's P and Q lie matrix after matrix.
        state = hook.PowerSGDState(process_group=None, matrix_approximation_rank=p_rank, start_powerSGD_iter=START,
                                   min_compression_rate=1, use_error_feedback=True, warm_start=True,
                                   orthogonalization_epsilon=1e-8, batch_tensors_with_same_shape=False)
        largest = 0.0
        for step in range(STEPS):
            gradient, loom_mean = steps[2 * step], steps[2 * step + 1]
            if step == START:
                # The hook's first Q is loom's (it would draw its own): the hook orthonormalises it as loom does.
                qs = [q.reshape(-1) for q in first_q if q.numel() > 0]
                state.q_memory_dict[0] = torch.cat(qs).clone()
                state.p_memory_dict[0] = torch.empty(sum(s[0] * min(p_rank, s[0], torch.Size(s).numel() // s[0])
                                                         for _, s in SLOTS if len(s) >= 2))
            mean = hook.powerSGD_hook(state, Bucket(gradient.clone())).wait()
            diff = ((mean - loom_mean).abs() / loom_mean.abs().clamp(min=1.0)).max().item()
            largest = max(largest, diff)
            if os.environ.get("VERBOSE") and rank == 0: print(p_rank, step, diff, loom_mean.abs().max().item())
        worst[p_rank] = largest
    result[rank] = worst
    # As bench/reference_gpt.py: a gloo worker thread still dropping a Python tensor when the
    # interpreter finalises aborts the process ("terminate called without an active exception"), so
    # the ranks meet, the group goes, and the process leaves without finalising (its result is sent).
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main():
    dump, world = sys.argv[1], int(sys.argv[2])
    with mp.Manager() as manager:
        result = manager.dict()
        mp.spawn(replay, args=(world, dump, result), nprocs=world)
        failed = False
        for p_rank in (1, 3):
            worst = max(result[r][p_rank] for r in range(world))
            ok = worst <= TOLERANCE
            failed |= not ok
            print(f"PowerSGD rank {p_rank}, {world} ranks, {STEPS} steps ({STEPS - START} compressed): loom's mean "
                  f"gradient within {worst:.2e} of PyTorch's hook (bar {TOLERANCE:g}){'' if ok else ': FAIL'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
