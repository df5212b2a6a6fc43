// Loads and stores of loom's storage types as fp32, and 16-byte vectors of them, for the kernels
// under core/cuda_kernels/ (no LibTorch header); and the launches' shared host side: the storage
// type to a kernel's template argument, and a grid-stride loop's block count.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "core/cuda_kernels.h"

namespace loom::cuda {

__device__ __forceinline__ float to_float(float x) {
  return x;
}
__device__ __forceinline__ float to_float(__half x) {
  return __half2float(x);
}
__device__ __forceinline__ float to_float(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

// Round to nearest even, as LibTorch's conversions do on the CPU and the GPU.
template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// Rounds X to T and back: the value a tensor of type T holds after a store.
template <typename T>
__device__ __forceinline__ float rounded(float x) {
  return to_float(from_float<T>(x));
}

// 16 bytes of T: the unit of the kernels' vector loads and stores.
template <typename T>
struct alignas(16) Vec16 {
  static constexpr int size = 16 / sizeof(T);
  T v[size];
};

inline bool aligned16(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}

// Calls F with a value of the C++ type STORAGE names (float, __half or __nv_bfloat16): the one
// switch from Storage to a kernel's template argument (`using T = decltype(value)` inside F).
template <typename F>
void dispatch_storage(Storage storage, F&& f) {
  switch (storage) {
    case Storage::f32: return f(float{});
    case Storage::f16: return f(__half{});
    case Storage::bf16: return f(__nv_bfloat16{});
  }
}

// Blocks for a grid-stride loop over ITEMS with THREADS a block: one item a thread, at most 65536
// blocks (each thread then strides), at least one.
inline unsigned grid_blocks(int64_t items, int threads) {
  const int64_t wanted = (items + threads - 1) / threads;
  return static_cast<unsigned>(wanted < 1 ? 1 : (wanted > 65536 ? 65536 : wanted));
}

inline void check_launch(const char* kernel) {
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string("loom CUDA kernel ") + kernel +
                             " did not launch: " + cudaGetErrorString(status));
  }
}

}  // namespace loom::cuda
