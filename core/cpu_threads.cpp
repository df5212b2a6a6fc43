#include "core/cpu_threads.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>

namespace loom {

void parallel_over_threads(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  torch::NoGradGuard no_grad;
  if (n <= 0) return;
  at::parallel_for(0, n, /*grain_size=*/1, [&](int64_t begin, int64_t end) {
    torch::NoGradGuard piece_no_grad;  // grad mode is per thread
    fn(begin, end);
  });
}

void parallel_over_blocks(int64_t n, int64_t block, const std::function<void(int64_t, int64_t)>& fn) {
  parallel_over_threads((n + block - 1) / block, [&](int64_t first, int64_t last) {
    for (int64_t b = first; b < last; ++b) fn(b * block, std::min(n, (b + 1) * block));
  });
}

void parallel_over_elements(int64_t numel, const std::function<void(int64_t, int64_t)>& fn) {
  constexpr int64_t kAlignment = 64;
  // A tensor below LibTorch's own grain (at::internal::GRAIN_SIZE) stays in one piece on the
  // calling thread, where LibTorch would not cut it either; above it, at::parallel_for deals the
  // 64-element blocks to the threads, and the op runs single-threaded on each piece (it is in a
  // parallel region), so nothing else cuts it.
  const int64_t blocks = (numel + kAlignment - 1) / kAlignment;
  const int64_t grain = std::max<int64_t>(1, at::internal::GRAIN_SIZE / kAlignment);
  torch::NoGradGuard no_grad;
  if (numel <= 0) return;
  auto piece = [&](int64_t begin, int64_t end) {
    torch::NoGradGuard piece_no_grad;
    const int64_t first = begin * kAlignment, last = std::min(numel, end * kAlignment);
    fn(first, last - first);
  };
  if (blocks < grain || at::get_num_threads() == 1 || at::in_parallel_region()) {
    // One piece: LibTorch would not cut it either (below its grain, one thread, or nested).
    piece(0, blocks);
    return;
  }
  at::parallel_for(0, blocks, grain, piece);
}

}  // namespace loom
