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

// The CUDA runtime loom links, for `loom --version`: "13.0"; empty when built without it.
std::string cuda_runtime_version();

// The GPU's name as the CUDA runtime reports it; empty without the runtime or when it cannot be read.
std::string cuda_runtime_gpu_name(int64_t index);

// The GPU's memory in bytes (its total, as the CUDA runtime reports it); -1 without the runtime
// or when it cannot be read.
int64_t cuda_runtime_total_memory(int64_t index);

// cudaSetDevice(INDEX); throws std::runtime_error with CUDA's message when it fails. Nothing
// without the runtime.
void cuda_runtime_set_device(int64_t index);

// The libtorch_cuda.so of the LibTorch loom was built against; empty for a LibTorch without CUDA.
std::string torch_cuda_library();

// Loads libtorch_cuda.so once per process (the library's own initialisers register its CUDA
// kernels and hooks with LibTorch). Returns an empty string on success, else why it could
// not load (a build without CUDA, or dlopen's message).
std::string load_torch_cuda();

}  // namespace loom
