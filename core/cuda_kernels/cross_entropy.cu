// The cross-entropy of one rank's whole vocabulary in two kernels (core/cuda_kernels.h): forward
// reads each row of logits once, in its storage type, keeping a running maximum and sum of
// exponentials per thread (an "online" softmax); backward reads the row again and writes its
// gradient, rounded once. LibTorch's composition instead copies bf16 logits to fp32 and passes
// over those six times (docs/performance.md: 7% of the 1B Llama's step at a 128k vocabulary).
#include <atomic>
#include <cmath>

#include "core/cuda_kernels.h"
#include "core/cuda_kernels/storage.cuh"

namespace loom::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int64_t kIgnoreIndex = -100;

// A running (maximum, sum of exp(x - maximum)) pair, merged across threads.
struct MaxSum {
  float max = -INFINITY;
  float sum = 0.f;
};

// While a side's maximum is -inf its sum is 0, or NaN once a NaN was seen: kept as it is.
__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  MaxSum out;
  out.max = fmaxf(a.max, b.max);
  if (out.max == -INFINITY) {  // both empty (or every value -inf, or NaN)
    out.sum = a.sum + b.sum;
    return out;
  }
  out.sum = (a.max == -INFINITY ? a.sum : a.sum * expf(a.max - out.max)) +
            (b.max == -INFINITY ? b.sum : b.sum * expf(b.max - out.max));
  return out;
}

// Adds N values to the running pair: one rescale for the group, then one exponential each.
// A NaN value makes the sum NaN (fmaxf skips it, expf does not), as LibTorch's loss would be,
// also while nothing but -inf (or NaN) has come yet.
template <int N>
__device__ __forceinline__ void add(MaxSum& acc, const float (&x)[N]) {
  float group_max = x[0];
#pragma unroll
  for (int i = 1; i < N; ++i) group_max = fmaxf(group_max, x[i]);
  if (group_max > acc.max) {
    if (acc.max != -INFINITY) acc.sum *= expf(acc.max - group_max);
    acc.max = group_max;
  }
  if (acc.max == -INFINITY) {  // only -infs (and NaNs) so far: the -infs add nothing
#pragma unroll
    for (int i = 0; i < N; ++i)
      if (x[i] != x[i]) acc.sum = x[i];
    return;
  }
#pragma unroll
  for (int i = 0; i < N; ++i) acc.sum += expf(x[i] - acc.max);
}

__device__ MaxSum block_merge(MaxSum acc) {
  __shared__ float maxes[kThreads / 32], sums[kThreads / 32];
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    MaxSum other{__shfl_xor_sync(0xffffffffu, acc.max, offset), __shfl_xor_sync(0xffffffffu, acc.sum, offset)};
    acc = merge(acc, other);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    maxes[warp] = acc.max;
    sums[warp] = acc.sum;
  }
  __syncthreads();
  if (warp == 0) {
    acc = lane < kThreads / 32 ? MaxSum{maxes[lane], sums[lane]} : MaxSum{};
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
      MaxSum other{__shfl_xor_sync(0xffffffffu, acc.max, offset), __shfl_xor_sync(0xffffffffu, acc.sum, offset)};
      acc = merge(acc, other);
    }
  }
  return acc;  // meaningful in thread 0
}

// The elements of a row before its first 16-byte boundary (a row of odd length starts anywhere).
template <typename T>
__device__ __forceinline__ int64_t head_length(const T* row, int64_t vocab) {
  const auto misalignment = reinterpret_cast<std::uintptr_t>(row) % 16;
  const int64_t head = misalignment == 0 ? 0 : static_cast<int64_t>((16 - misalignment) / sizeof(T));
  return head < vocab ? head : vocab;
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(const T* __restrict__ logits, const int64_t* __restrict__ targets, int64_t vocab,
                   float* __restrict__ loss, float* __restrict__ lse) {
  using V = Vec16<T>;
  const int64_t r = blockIdx.x;
  const T* row = logits + r * vocab;
  const int64_t head = head_length(row, vocab);
  const int64_t vectors = (vocab - head) / V::size;
  const V* body = reinterpret_cast<const V*>(row + head);
  MaxSum acc;
  for (int64_t i = threadIdx.x; i < vectors; i += kThreads) {
    const V v = body[i];
    float x[V::size];
#pragma unroll
    for (int k = 0; k < V::size; ++k) x[k] = to_float(v.v[k]);
    add(acc, x);
  }
  // The head and the tail, one by one.
  for (int64_t j = threadIdx.x; j < head; j += kThreads) {
    const float x[1] = {to_float(row[j])};
    add(acc, x);
  }
  for (int64_t j = head + vectors * V::size + threadIdx.x; j < vocab; j += kThreads) {
    const float x[1] = {to_float(row[j])};
    add(acc, x);
  }
  acc = block_merge(acc);
  if (threadIdx.x == 0) {
    const float row_lse = acc.max + logf(acc.sum);
    const int64_t t = targets[r];
    lse[r] = row_lse;
    if (t == kIgnoreIndex) {
      loss[r] = 0.f;
    } else if (t >= 0 && t < vocab) {
      loss[r] = row_lse - to_float(row[t]);
    } else {
      loss[r] = NAN;
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    backward_kernel(const T* __restrict__ logits, const int64_t* __restrict__ targets, const float* __restrict__ lse,
                    const float* __restrict__ grad_loss, int64_t vocab, bool vectorize, T* __restrict__ grad) {
  using V = Vec16<T>;
  const int64_t r = blockIdx.x;
  const T* row = logits + r * vocab;
  T* out = grad + r * vocab;
  const int64_t t = targets[r];
  const float g = t == kIgnoreIndex ? 0.f : grad_loss[r];
  const float row_lse = lse[r];
  auto value = [&](float x, int64_t j) {
    if (g == 0.f) return from_float<T>(0.f);
    const float p = expf(x - row_lse);
    return from_float<T>((j == t ? p - 1.f : p) * g);
  };
  const int64_t head = vectorize ? head_length(row, vocab) : vocab;
  const int64_t vectors = vectorize ? (vocab - head) / V::size : 0;
  const V* body = reinterpret_cast<const V*>(row + head);
  V* out_body = reinterpret_cast<V*>(out + head);
  for (int64_t i = threadIdx.x; i < vectors; i += kThreads) {
    const V v = body[i];
    V o;
    const int64_t first = head + i * V::size;
#pragma unroll
    for (int k = 0; k < V::size; ++k) o.v[k] = value(to_float(v.v[k]), first + k);
    out_body[i] = o;
  }
  for (int64_t j = threadIdx.x; j < head; j += kThreads) out[j] = value(to_float(row[j]), j);
  for (int64_t j = head + vectors * V::size + threadIdx.x; j < vocab; j += kThreads)
    out[j] = value(to_float(row[j]), j);
}

template <typename T>
void forward_as(const void* logits, const int64_t* targets, int64_t rows, int64_t vocab, float* loss, float* lse,
                cudaStream_t stream) {
  forward_kernel<T>
      <<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(static_cast<const T*>(logits), targets, vocab, loss, lse);
  check_launch("cross_entropy_forward");
}

template <typename T>
void backward_as(const void* logits, const int64_t* targets, const float* lse, const float* grad_loss, int64_t rows,
                 int64_t vocab, void* grad, cudaStream_t stream) {
  // Vector loads and stores need the two rows to sit alike against 16-byte boundaries.
  const bool vectorize = reinterpret_cast<std::uintptr_t>(logits) % 16 == reinterpret_cast<std::uintptr_t>(grad) % 16;
  backward_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      static_cast<const T*>(logits), targets, lse, grad_loss, vocab, vectorize, static_cast<T*>(grad));
  check_launch("cross_entropy_backward");
}

void check_rows(int64_t rows) {
  if (rows > 0x7fffffff) throw std::invalid_argument("loom cross_entropy kernel: more than 2^31 - 1 rows");
}

}  // namespace

bool cuda_kernels_built() {
  return true;
}

bool cuda_kernels_run_on(int64_t device) {
  // Per device: 0 not asked yet, 1 yes, 2 no (a memo of a fixed fact, not state).
  static std::atomic<int> known[64] = {};
  if (device < 0 || device >= 64) return false;
  int answer = known[device].load();
  if (answer == 0) {
    int major = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, static_cast<int>(device)) != cudaSuccess) {
      cudaGetLastError();
      major = 0;
    }
    answer = major >= 8 ? 1 : 2;
    known[device].store(answer);
  }
  return answer == 1;
}

void cross_entropy_forward(const void* logits, Storage storage, const int64_t* targets, int64_t rows, int64_t vocab,
                           float* loss, float* lse, void* stream) {
  check_rows(rows);
  if (rows == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  dispatch_storage(storage,
                   [&](auto value) { forward_as<decltype(value)>(logits, targets, rows, vocab, loss, lse, s); });
}

void cross_entropy_backward(const void* logits, Storage storage, const int64_t* targets, const float* lse,
                            const float* grad_loss, int64_t rows, int64_t vocab, void* grad_logits, void* stream) {
  check_rows(rows);
  if (rows == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  dispatch_storage(storage, [&](auto value) {
    backward_as<decltype(value)>(logits, targets, lse, grad_loss, rows, vocab, grad_logits, s);
  });
}

}  // namespace loom::cuda
