// fp32 += bf16 (or fp16, or fp32) over one tensor: each micro-batch's gradient added into its
// master's fp32 gradient (parallel/master_weights.cpp). LibTorch's add_ of two types takes its
// unvectorised path (one element a thread, its types converted at run time): 4% of the 1B Llama's
// step on an H200. The sum is the same fp32 addition, so the bits are LibTorch's.
#include "core/cuda_kernels.h"
#include "core/cuda_kernels/storage.cuh"

namespace loom::cuda {
namespace {

constexpr int kThreads = 256;

// Eight elements a step: one 16-byte load of a 16-bit source (two of fp32), two of the fp32
// destination. VECTORIZE: both pointers 16-byte aligned.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    accumulate_kernel(float* __restrict__ dst, const T* __restrict__ src, int64_t n, bool vectorize) {
  constexpr int kGroup = 8;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t groups = vectorize ? n / kGroup : 0;
  for (int64_t i = first; i < groups; i += stride) {
    float4* d = reinterpret_cast<float4*>(dst + i * kGroup);
    float4 lo = d[0], hi = d[1];
    float x[kGroup];
    if constexpr (sizeof(T) == 2) {
      const Vec16<T> s = reinterpret_cast<const Vec16<T>*>(src)[i];
#pragma unroll
      for (int k = 0; k < kGroup; ++k) x[k] = to_float(s.v[k]);
    } else {
      const float4* s = reinterpret_cast<const float4*>(src + i * kGroup);
      const float4 a = s[0], b = s[1];
      x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
    }
    lo.x += x[0], lo.y += x[1], lo.z += x[2], lo.w += x[3];
    hi.x += x[4], hi.y += x[5], hi.z += x[6], hi.w += x[7];
    d[0] = lo;
    d[1] = hi;
  }
  for (int64_t j = groups * kGroup + first; j < n; j += stride) dst[j] += to_float(src[j]);
}

template <typename T>
void accumulate_as(float* dst, const void* src, int64_t n, cudaStream_t stream) {
  const bool vectorize = aligned16(dst) && aligned16(src);
  accumulate_kernel<T>
      <<<grid_blocks(n / 8, kThreads), kThreads, 0, stream>>>(dst, static_cast<const T*>(src), n, vectorize);
  check_launch("accumulate_fp32");
}

}  // namespace

void accumulate_fp32(float* dst, const void* src, int64_t n, Storage storage, void* stream) {
  if (n == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  dispatch_storage(storage, [&](auto value) { accumulate_as<decltype(value)>(dst, src, n, s); });
}

}  // namespace loom::cuda
