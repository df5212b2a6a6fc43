// SwiGLU's gate in one kernel forward (reads gate and up, writes the product) and one back
// (reads gate, up and the gradient, writes both gradients): the composition silu, multiply and
// their backwards is five kernels and twice the traffic. Rounded where the CPU's SwiGLU
// (models/swiglu.cpp) rounds, so that the GPU's bf16 runs stay the CPU's (bench/gpu/check.sh).
#include "core/cuda_kernels.h"
#include "core/cuda_kernels/storage.cuh"

namespace loom::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float sigmoid(float g) {
  return 1.f / (1.f + expf(-g));
}

template <typename T>
__device__ __forceinline__ T forward_one(T gate, T up) {
  const float g = to_float(gate);
  const float s = rounded<T>(g / (1.f + expf(-g)));  // silu(gate), stored by the CPU before the product
  return from_float<T>(s * to_float(up));
}

template <typename T>
__device__ __forceinline__ void backward_one(T gate, T up, T dy, T& grad_gate, T& grad_up) {
  const float g = to_float(gate), d = to_float(dy);
  const float sig = sigmoid(g);
  grad_up = from_float<T>(rounded<T>(g / (1.f + expf(-g))) * d);
  const float dyu = rounded<T>(d * to_float(up));
  grad_gate = from_float<T>(dyu * sig * (1.f + g * (1.f - sig)));
}

// VECTORIZE: every pointer 16-byte aligned; the elements past the last whole vector go one by one.
template <typename T>
__global__ void __launch_bounds__(kThreads) forward_kernel(const T* __restrict__ gate, const T* __restrict__ up,
                                                           int64_t n, bool vectorize, T* __restrict__ out) {
  using V = Vec16<T>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t vectors = vectorize ? n / V::size : 0;
  for (int64_t i = first; i < vectors; i += stride) {
    const V g = reinterpret_cast<const V*>(gate)[i], u = reinterpret_cast<const V*>(up)[i];
    V o;
#pragma unroll
    for (int k = 0; k < V::size; ++k) o.v[k] = forward_one(g.v[k], u.v[k]);
    reinterpret_cast<V*>(out)[i] = o;
  }
  for (int64_t j = vectors * V::size + first; j < n; j += stride) out[j] = forward_one(gate[j], up[j]);
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    backward_kernel(const T* __restrict__ gate, const T* __restrict__ up, const T* __restrict__ dy, int64_t n,
                    bool vectorize, T* __restrict__ grad_gate, T* __restrict__ grad_up) {
  using V = Vec16<T>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t vectors = vectorize ? n / V::size : 0;
  for (int64_t i = first; i < vectors; i += stride) {
    const V g = reinterpret_cast<const V*>(gate)[i], u = reinterpret_cast<const V*>(up)[i];
    const V d = reinterpret_cast<const V*>(dy)[i];
    V gg, gu;
#pragma unroll
    for (int k = 0; k < V::size; ++k) backward_one(g.v[k], u.v[k], d.v[k], gg.v[k], gu.v[k]);
    reinterpret_cast<V*>(grad_gate)[i] = gg;
    reinterpret_cast<V*>(grad_up)[i] = gu;
  }
  for (int64_t j = vectors * V::size + first; j < n; j += stride)
    backward_one(gate[j], up[j], dy[j], grad_gate[j], grad_up[j]);
}

template <typename T>
void forward_as(const void* gate, const void* up, int64_t n, void* out, cudaStream_t stream) {
  const bool vectorize = aligned16(gate) && aligned16(up) && aligned16(out);
  forward_kernel<T><<<grid_blocks(n / Vec16<T>::size, kThreads), kThreads, 0, stream>>>(
      static_cast<const T*>(gate), static_cast<const T*>(up), n, vectorize, static_cast<T*>(out));
  check_launch("swiglu_forward");
}

template <typename T>
void backward_as(const void* gate, const void* up, const void* dy, int64_t n, void* grad_gate, void* grad_up,
                 cudaStream_t stream) {
  const bool vectorize =
      aligned16(gate) && aligned16(up) && aligned16(dy) && aligned16(grad_gate) && aligned16(grad_up);
  backward_kernel<T><<<grid_blocks(n / Vec16<T>::size, kThreads), kThreads, 0, stream>>>(
      static_cast<const T*>(gate), static_cast<const T*>(up), static_cast<const T*>(dy), n, vectorize,
      static_cast<T*>(grad_gate), static_cast<T*>(grad_up));
  check_launch("swiglu_backward");
}

}  // namespace

void swiglu_forward(const void* gate, const void* up, int64_t n, Storage storage, void* out, void* stream) {
  if (n == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  dispatch_storage(storage, [&](auto value) { forward_as<decltype(value)>(gate, up, n, out, s); });
}

void swiglu_backward(const void* gate, const void* up, const void* grad_out, int64_t n, Storage storage,
                     void* grad_gate, void* grad_up, void* stream) {
  if (n == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  dispatch_storage(storage,
                   [&](auto value) { backward_as<decltype(value)>(gate, up, grad_out, n, grad_gate, grad_up, s); });
}

}  // namespace loom::cuda
