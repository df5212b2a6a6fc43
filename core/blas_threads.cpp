#include "core/blas_threads.h"

#include <dlfcn.h>
#include <torch/torch.h>

#include <algorithm>
#include <exception>
#include <thread>
#include <vector>

namespace loom {
namespace {

using GetThreads = int (*)();
using SetThreads = void (*)(int);

// OpenBLAS's own calls, looked up once; absent when another BLAS is loaded.
struct OpenBlas {
  GetThreads get = reinterpret_cast<GetThreads>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  SetThreads set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
};

const OpenBlas& openblas() {
  static const OpenBlas api;
  return api;
}

// Puts BLAS back to its thread count however the parallel section ends.
class SingleThreadedBlas {
 public:
  explicit SingleThreadedBlas(int threads) : threads_(threads) { openblas().set(1); }
  ~SingleThreadedBlas() { openblas().set(threads_); }
  SingleThreadedBlas(const SingleThreadedBlas&) = delete;
  SingleThreadedBlas& operator=(const SingleThreadedBlas&) = delete;

 private:
  int threads_;
};

}  // namespace

int blas_threads() {
  const auto& api = openblas();
  return api.get && api.set ? std::max(1, api.get()) : 1;
}

void parallel_over_blas_threads(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  torch::NoGradGuard no_grad;
  const int64_t pieces = std::min<int64_t>(n, blas_threads());
  if (pieces <= 1) {
    if (n > 0) fn(0, n);
    return;
  }
  SingleThreadedBlas single(static_cast<int>(blas_threads()));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(pieces));
  auto run = [&](int64_t piece) {
    try {
      torch::NoGradGuard piece_no_grad;       // grad mode is per thread
      if (piece > 0) at::init_num_threads();  // LibTorch's thread count is per thread too
      fn(n * piece / pieces, n * (piece + 1) / pieces);
    } catch (...) {
      errors[static_cast<size_t>(piece)] = std::current_exception();
    }
  };
  std::vector<std::thread> others;
  others.reserve(static_cast<size_t>(pieces - 1));
  int64_t piece = 1;
  try {
    for (; piece < pieces; ++piece) others.emplace_back(run, piece);
  } catch (...) {  // no thread to be had: the pieces not started run here
    for (; piece < pieces; ++piece) run(piece);
  }
  run(0);
  for (auto& t : others) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

void parallel_over_elements(int64_t numel, const std::function<void(int64_t, int64_t)>& fn) {
  constexpr int64_t kAlignment = 64;
  constexpr int64_t kMinParallelElements = 1 << 18;  // the 2-core machine's default GPT: ~4% slower below
  if (numel < kMinParallelElements) {
    fn(0, numel);
    return;
  }
  const int64_t blocks = (numel + kAlignment - 1) / kAlignment;
  parallel_over_blas_threads(blocks, [&](int64_t begin, int64_t end) {
    const int64_t first = begin * kAlignment, last = std::min(numel, end * kAlignment);
    fn(first, last - first);
  });
}

}  // namespace loom
