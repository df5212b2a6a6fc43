"""Small all-reduces over Gloo: its ring against one all-to-all and a local sum ("one-shot").

    mpirun -np P .venv/bin/python bench/gloo_small_allreduce.py

PyTorch's own Gloo process group (the one inside the wheel loom links), one thread per rank; rank 0
prints, for each message size, the milliseconds of dist.all_reduce (Gloo's ring), of the one-shot
(every rank sends its whole tensor to every peer with all_to_all_single and sums the P rows in rank
order, as parallel/gloo_communicator.cpp does below 256 KiB) and of dist.all_gather, each the mean
of many calls. Numbers and the choice of 256 KiB: bench/README.md, "Small all-reduces over Gloo".
"""
import os
import time

import torch
import torch.distributed as dist


def mean_ms(fn, calls):
    for _ in range(3):
        fn()
    dist.barrier()
    start = time.time()
    for _ in range(calls):
        fn()
    return 1e3 * (time.time() - start) / calls


def main():
    torch.set_num_threads(1)
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("RANK", "0")))
    world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
    port = os.environ.get("MASTER_PORT", "29561")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    if rank == 0:
        print(f"{world} ranks, {os.cpu_count()} CPUs: milliseconds per call")
        print(f"{'bytes':>9} {'ring':>7} {'one-shot':>9} {'all_gather':>11}")
    for numel in (256, 4096, 16384, 65536, 262144, 1048576):
        calls = 100 if numel <= 65536 else 20
        tensor = torch.ones(numel)
        sent, received = torch.empty(world * numel), torch.empty(world * numel)

        def one_shot():
            sent.view(world, numel).copy_(tensor.expand(world, numel))
            dist.all_to_all_single(received, sent)
            torch.sum(received.view(world, numel), 0, out=tensor)

        parts = [torch.empty(numel) for _ in range(world)]
        ring = mean_ms(lambda: dist.all_reduce(tensor), calls)
        shot = mean_ms(one_shot, calls)
        gather = mean_ms(lambda: dist.all_gather(parts, tensor), calls)
        if rank == 0:
            print(f"{4 * numel:>9} {ring:7.3f} {shot:9.3f} {gather:11.3f}", flush=True)
    dist.destroy_process_group()


main()
