// The MoE combine when every choice is kept (parallel/weighted_combine.cpp): each token's output is
// its K expert rows, gathered from where the grouped products left them, times the router's
// weights and summed. Composed, that was a gather, a broadcasting product over [tokens, K, H] (the
// non-vectorised elementwise path, since the weights broadcast) and a sum, and backward two more
// such products and two reductions: 23 ms of the MoE benchmark's 334 ms step on an H200. Here one
// block per token reads its K rows once each way. Rounded as the composition rounds: each product
// stored in the storage type before the sum over K (in fp32, rounded once), and each weight's
// gradient summed in fp32 from products stored in the storage type.
#include "core/cuda_kernels.h"
#include "core/cuda_kernels/storage.cuh"

namespace loom::cuda {
namespace {

constexpr int kThreads = 256;

// The sum of V over the block, in every thread (SCRATCH: one float per warp).
__device__ float block_sum(float v, float* scratch) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffff, v, offset);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // SCRATCH's last use is done
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = 0.f;
  for (int w = 0; w < kThreads / 32; ++w) total += scratch[w];
  return total;
}

// One token a block. VECTORIZE: WIDTH a multiple of 16 bytes' worth and every row 16-byte aligned.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(const T* __restrict__ rows, const int64_t* __restrict__ row_of_choice, const T* __restrict__ weights,
                   int k, int64_t width, bool vectorize, T* __restrict__ out) {
  using V = Vec16<T>;
  const int64_t token = blockIdx.x;
  T* o = out + token * width;
  const int64_t vectors = vectorize ? width / V::size : 0;
  for (int64_t i = threadIdx.x; i < vectors; i += kThreads) {
    float sum[V::size] = {};
    for (int j = 0; j < k; ++j) {
      const float w = to_float(weights[token * k + j]);
      const V x = reinterpret_cast<const V*>(rows + row_of_choice[token * k + j] * width)[i];
#pragma unroll
      for (int e = 0; e < V::size; ++e) sum[e] += rounded<T>(to_float(x.v[e]) * w);
    }
    V y;
#pragma unroll
    for (int e = 0; e < V::size; ++e) y.v[e] = from_float<T>(sum[e]);
    reinterpret_cast<V*>(o)[i] = y;
  }
  for (int64_t h = vectors * V::size + threadIdx.x; h < width; h += kThreads) {
    float sum = 0.f;
    for (int j = 0; j < k; ++j) {
      sum += rounded<T>(to_float(rows[row_of_choice[token * k + j] * width + h]) * to_float(weights[token * k + j]));
    }
    o[h] = from_float<T>(sum);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    backward_kernel(const T* __restrict__ rows, const int64_t* __restrict__ row_of_choice,
                    const T* __restrict__ weights, const T* __restrict__ grad_out, int k, int64_t width, bool vectorize,
                    T* __restrict__ grad_rows, T* __restrict__ grad_weights) {
  using V = Vec16<T>;
  __shared__ float scratch[kThreads / 32];
  const int64_t token = blockIdx.x;
  const T* dy = grad_out + token * width;
  const int64_t vectors = vectorize ? width / V::size : 0;
  for (int j = 0; j < k; ++j) {
    const float w = to_float(weights[token * k + j]);
    const int64_t row = row_of_choice[token * k + j];
    const T* x = rows + row * width;
    T* dx = grad_rows + row * width;
    float partial = 0.f;  // this thread's share of the weight's gradient
    for (int64_t i = threadIdx.x; i < vectors; i += kThreads) {
      const V d = reinterpret_cast<const V*>(dy)[i], xv = reinterpret_cast<const V*>(x)[i];
      V g;
#pragma unroll
      for (int e = 0; e < V::size; ++e) {
        const float de = to_float(d.v[e]);
        g.v[e] = from_float<T>(de * w);
        partial += rounded<T>(de * to_float(xv.v[e]));
      }
      reinterpret_cast<V*>(dx)[i] = g;
    }
    for (int64_t h = vectors * V::size + threadIdx.x; h < width; h += kThreads) {
      const float de = to_float(dy[h]);
      dx[h] = from_float<T>(de * w);
      partial += rounded<T>(de * to_float(x[h]));
    }
    const float total = block_sum(partial, scratch);
    if (threadIdx.x == 0) grad_weights[token * k + j] = from_float<T>(total);
  }
}

template <typename T>
bool vectorizable(const void* a, const void* b, int64_t width) {
  return width % Vec16<T>::size == 0 && aligned16(a) && aligned16(b);
}

}  // namespace

void combine_forward(const void* rows, const int64_t* row_of_choice, const void* weights, int64_t tokens, int64_t k,
                     int64_t width, Storage storage, void* out, void* stream) {
  if (tokens == 0 || width == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  dispatch_storage(storage, [&](auto value) {
    using T = decltype(value);
    forward_kernel<T><<<static_cast<unsigned>(tokens), kThreads, 0, s>>>(
        static_cast<const T*>(rows), row_of_choice, static_cast<const T*>(weights), static_cast<int>(k), width,
        vectorizable<T>(rows, out, width), static_cast<T*>(out));
  });
  check_launch("combine_forward");
}

void combine_backward(const void* rows, const int64_t* row_of_choice, const void* weights, const void* grad_out,
                      int64_t tokens, int64_t k, int64_t width, Storage storage, void* grad_rows, void* grad_weights,
                      void* stream) {
  if (tokens == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  dispatch_storage(storage, [&](auto value) {
    using T = decltype(value);
    const bool vectorize = vectorizable<T>(rows, grad_out, width) && aligned16(grad_rows);
    backward_kernel<T><<<static_cast<unsigned>(tokens), kThreads, 0, s>>>(
        static_cast<const T*>(rows), row_of_choice, static_cast<const T*>(weights), static_cast<const T*>(grad_out),
        static_cast<int>(k), width, vectorize, static_cast<T*>(grad_rows), static_cast<T*>(grad_weights));
  });
  check_launch("combine_backward");
}

}  // namespace loom::cuda
