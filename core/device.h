// Where a rank trains: train.device resolved against the GPUs this LibTorch
// sees, and what loom knows of a GPU (its name, its dense bf16 peak for MFU).
#pragma once

#include <torch/torch.h>

#include <string>

#include "core/config_enums.h"

namespace loom {

// SETTING is train.device. With cuda each local rank takes
// the GPU of its local rank, so a node needs a GPU per local rank; auto takes
// the GPUs when there are enough of them, else the CPU. Throws
// InputError naming train.device when the setting cannot be met.
torch::Device resolve_train_device(TrainDevice setting, int64_t local_rank, int64_t local_world, int64_t visible_gpus);

// The same against this process's LibTorch.
torch::Device resolve_train_device(TrainDevice setting, int64_t local_rank, int64_t local_world);

// The GPU's name as the CUDA runtime reports it ("NVIDIA H100 80GB HBM3"); empty
// when loom was built without the CUDA runtime or the device cannot be read.
std::string gpu_name(int64_t index);

// Dense bf16 tensor-core peak of one GPU in TFLOP/s, from its vendor's data
// sheet (no sparsity), for the GPUs named; 0 for anything else.
double known_bf16_peak_tflops(const std::string& gpu_name);

// What this binary was built with, for `loom --version`:
// "LibTorch 2.11.0, CUDA: yes (13.0), NCCL: yes (2.28)". CUDA is the runtime loom links
// (compiled in, whether or not a GPU is present); NCCL is loom's NCCL communicator.
std::string build_description();

// Makes DEVICE the current CUDA device of this thread (NCCL and CUDA streams use
// it); nothing for a CPU device.
void use_device(const torch::Device& device);

}  // namespace loom
