// Rotary position embedding (rotate-half form) in one kernel each way: each thread reads a
// feature pair (x1, x2) of one head and its angle's cos and sin, and writes the rotated pair.
// models/rotary.cpp composes a product and two multiply-adds (three kernels each way, 5% of the
// 1B Llama's step on an H200); this rounds where that composition rounds, so that a GPU run and a
// CPU run of a bf16 model round alike.
#include "core/cuda_kernels.h"
#include "core/cuda_kernels/storage.cuh"

namespace loom::cuda {
namespace {

constexpr int kThreads = 256;

// Forward, with halves x1, x2 and the angle's halves (c1, c2), (s1, s2):
//   out1 = x1 c1 - x2 s1,  out2 = x2 c2 + x1 s2;
// backward, with the gradient's halves in x1, x2:
//   dx1 = g1 c1 + g2 s2,   dx2 = g2 c2 - g1 s1.
// The first product is stored (rounded) before the second is added, as LibTorch's x * cos then
// addcmul_ do; __fmul_rn keeps the compiler from fusing it into the addition.
template <typename T, bool kBackward>
__global__ void __launch_bounds__(kThreads)
    rotate_kernel(const T* __restrict__ x, RotaryShape shape, const T* __restrict__ cos, const T* __restrict__ sin,
                  T* __restrict__ out) {
  const int64_t half = shape.head_dim / 2;
  const int64_t total = shape.batch * shape.seq * shape.heads * half;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t index = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; index < total; index += stride) {
    const int64_t i = index % half;
    int64_t row = index / half;
    const int64_t h = row % shape.heads;
    row /= shape.heads;
    const int64_t s = row % shape.seq, b = row / shape.seq;
    const T* in = x + b * shape.batch_stride + s * shape.seq_stride + h * shape.head_stride;
    const float x1 = to_float(in[i]), x2 = to_float(in[i + half]);
    const T* c = cos + s * shape.head_dim;
    const T* n = sin + s * shape.head_dim;
    const float c1 = to_float(c[i]), c2 = to_float(c[i + half]), s1 = to_float(n[i]), s2 = to_float(n[i + half]);
    T* o = out + ((b * shape.seq + s) * shape.heads + h) * shape.head_dim;
    if (!kBackward) {
      o[i] = from_float<T>(rounded<T>(__fmul_rn(x1, c1)) - x2 * s1);
      o[i + half] = from_float<T>(rounded<T>(__fmul_rn(x2, c2)) + x1 * s2);
    } else {
      o[i] = from_float<T>(rounded<T>(__fmul_rn(x1, c1)) + x2 * s2);
      o[i + half] = from_float<T>(rounded<T>(__fmul_rn(x2, c2)) - x1 * s1);
    }
  }
}

template <typename T>
void rotate_as(const void* x, const RotaryShape& shape, const void* cos, const void* sin, bool backward, void* out,
               cudaStream_t stream) {
  const int64_t total = shape.batch * shape.seq * shape.heads * (shape.head_dim / 2);
  const unsigned blocks = grid_blocks(total, kThreads);
  const auto* in = static_cast<const T*>(x);
  const auto *c = static_cast<const T*>(cos), *s = static_cast<const T*>(sin);
  if (backward) {
    rotate_kernel<T, true><<<blocks, kThreads, 0, stream>>>(in, shape, c, s, static_cast<T*>(out));
  } else {
    rotate_kernel<T, false><<<blocks, kThreads, 0, stream>>>(in, shape, c, s, static_cast<T*>(out));
  }
  check_launch("rotary");
}

}  // namespace

void rotary(const void* x, const RotaryShape& shape, const void* cos, const void* sin, Storage storage, bool backward,
            void* out, void* stream) {
  if (shape.batch * shape.seq * shape.heads * shape.head_dim == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  dispatch_storage(storage, [&](auto value) { rotate_as<decltype(value)>(x, shape, cos, sin, backward, out, s); });
}

}  // namespace loom::cuda
