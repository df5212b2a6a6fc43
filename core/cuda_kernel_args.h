// What a torch-level wrapper of loom's CUDA kernels (core/cuda_kernels.h) hands them: the storage
// type of its tensors, and LibTorch's current stream on their device (through c10's device
// guard, so that loom, which loads LibTorch's CUDA half at run time, calls none of it directly).
#pragma once

#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/torch.h>

#include <optional>

#include "core/cuda_kernels.h"

namespace loom::cuda {

// The kernels' storage type for DTYPE, or none for a type they do not take (fp64: LibTorch's).
inline std::optional<Storage> storage_of(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kFloat: return Storage::f32;
    case torch::kHalf: return Storage::f16;
    case torch::kBFloat16: return Storage::bf16;
    default: return std::nullopt;
  }
}

// Whether a tensor of DTYPE on DEVICE goes to loom's kernels: a CUDA tensor of a type they take,
// in a build that has them, on a GPU they were compiled for.
inline bool kernels_take(const torch::Device& device, torch::ScalarType dtype) {
  return device.is_cuda() && storage_of(dtype).has_value() && cuda_kernels_built() &&
         cuda_kernels_run_on(device.has_index() ? device.index() : 0);
}

// LibTorch's current CUDA stream on DEVICE, as the kernels take it.
inline void* current_stream(const torch::Device& device) {
  return c10::impl::VirtualGuardImpl(device.type()).getStream(device).native_handle();
}

}  // namespace loom::cuda
