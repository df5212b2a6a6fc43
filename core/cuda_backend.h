// LibTorch's CUDA half (libtorch_cuda.so, with cuDNN, cuBLAS and the rest behind it) is
// loaded only when a rank is about to use a GPU. Linked in, it cost every process 0.33 s
// and 350 MB at start-up on a machine with no GPU (its static initialisers and libraries),
// which every rank of every CPU job paid for nothing.
#pragma once

#include <cstdint>
#include <string>

namespace loom {

// GPUs the CUDA runtime sees, without loading LibTorch's CUDA half: 0 with no driver or no
// device; -1 when loom was built without the CUDA runtime (it cannot tell).
int64_t cuda_runtime_device_count();

// The libtorch_cuda.so of the LibTorch loom was built against; empty for a LibTorch without CUDA.
std::string torch_cuda_library();

// Loads libtorch_cuda.so once per process (the library's own initialisers register its CUDA
// kernels and hooks with LibTorch). Returns an empty string on success, else why it could
// not load (a build without CUDA, or dlopen's message).
std::string load_torch_cuda();

}  // namespace loom
