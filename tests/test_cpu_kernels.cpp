#include <dlfcn.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "core/blas_threads.h"
#include "models/causal_attention.h"
#include "models/gelu.h"

using namespace loom;

namespace {

// OpenBLAS's thread count for one scope (these tests compare 1 and 2 threads); a no-op without OpenBLAS.
class BlasThreads {
 public:
  explicit BlasThreads(int n) : before_(blas_threads()) { set(n); }
  ~BlasThreads() { set(before_); }

 private:
  static void set(int n) {
    using SetThreads = void (*)(int);
    if (auto f = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) f(n);
  }
  int before_;
};

// The textbook composition the fused function replaces.
torch::Tensor reference_attention(const torch::Tensor& qkv, int64_t heads) {
  const int64_t b = qkv.size(0), s = qkv.size(1), d = qkv.size(2) / (3 * heads);
  auto parts = qkv.view({b, s, heads, 3, d}).permute({3, 0, 2, 1, 4});
  auto scores = torch::matmul(parts[0], parts[1].transpose(-2, -1)) / std::sqrt(static_cast<double>(d));
  scores = scores.masked_fill(torch::ones({s, s}, torch::kBool).triu(1), -std::numeric_limits<double>::infinity());
  return torch::matmul(torch::softmax(scores, -1), parts[2]).transpose(1, 2).reshape({b, s, heads * d});
}

struct Result {
  torch::Tensor out, grad;
};

template <typename Fn>
Result run(Fn fn, const torch::Tensor& input, const torch::Tensor& grad_out) {
  auto x = input.detach().clone().requires_grad_(true);
  auto out = fn(x);
  out.backward(grad_out);
  return {out.detach(), x.grad()};
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

}  // namespace

TEST_CASE("causal attention head by head equals the textbook composition", "[kernels]") {
  torch::manual_seed(7);
  const int64_t heads = 3;
  // S = 150: two whole blocks of 64 queries and a part block; d = 8: the scale 1/sqrt(8) is not a power of two.
  auto qkv = torch::randn({2, 150, heads * 3 * 8});
  auto grad = torch::randn({2, 150, heads * 8});
  const auto want = run([&](const torch::Tensor& x) { return reference_attention(x, heads); }, qkv, grad);
  for (int threads : {1, 2}) {
    BlasThreads scope(threads);
    const auto got = run([&](const torch::Tensor& x) { return models::causal_attention(x, heads); }, qkv, grad);
    CHECK(max_diff(got.out, want.out) < 1e-5);
    CHECK(max_diff(got.grad, want.grad) < 1e-5);
  }
  // Causality: the first position sees only itself, so its context is its own v.
  const auto got = run([&](const torch::Tensor& x) { return models::causal_attention(x, heads); }, qkv, grad);
  auto v0 = qkv.view({2, 150, heads, 3, 8}).select(3, 2).select(1, 0).reshape({2, heads * 8});
  CHECK(max_diff(got.out.select(1, 0), v0) == 0.0);
}

TEST_CASE("causal attention and GELU give the same bits on any number of BLAS threads", "[kernels]") {
  torch::manual_seed(3);
  auto qkv = torch::randn({3, 100, 2 * 3 * 16});
  auto grad_attn = torch::randn({3, 100, 2 * 16});
  auto x = torch::randn({5, 77, 701});  // 269885 elements: in pieces, the last off the 64-element grid
  auto grad_x = torch::randn({5, 77, 701});
  Result attn[2], gelu[2];
  for (int threads : {1, 2}) {
    BlasThreads scope(threads);
    attn[threads - 1] = run([](const torch::Tensor& t) { return models::causal_attention(t, 2); }, qkv, grad_attn);
    gelu[threads - 1] = run([](const torch::Tensor& t) { return models::gelu_tanh(t); }, x, grad_x);
  }
  CHECK(torch::equal(attn[0].out, attn[1].out));
  CHECK(torch::equal(attn[0].grad, attn[1].grad));
  CHECK(torch::equal(gelu[0].out, gelu[1].out));
  CHECK(torch::equal(gelu[0].grad, gelu[1].grad));
  // And GELU is LibTorch's.
  const auto want = run([](const torch::Tensor& t) { return torch::gelu(t, "tanh"); }, x, grad_x);
  CHECK(torch::equal(gelu[1].out, want.out));
  CHECK(torch::equal(gelu[1].grad, want.grad));
}

TEST_CASE("causal attention in bf16 stays close to fp32", "[kernels]") {
  torch::manual_seed(11);
  auto qkv = torch::randn({2, 100, 2 * 3 * 8});  // fp32 in two blocks, bf16 in one
  auto grad = torch::randn({2, 100, 2 * 8});
  const auto fp32 = run([](const torch::Tensor& x) { return models::causal_attention(x, 2); }, qkv, grad);
  const auto bf16 = run([](const torch::Tensor& x) { return models::causal_attention(x, 2); }, qkv.to(torch::kBFloat16),
                        grad.to(torch::kBFloat16));
  CHECK(bf16.out.scalar_type() == torch::kBFloat16);
  CHECK(max_diff(bf16.out, fp32.out) < 0.05);
  CHECK(max_diff(bf16.grad, fp32.grad) < 0.1);
}

TEST_CASE("an exception in a piece of parallel work reaches the caller", "[kernels]") {
  BlasThreads scope(2);
  const bool openblas = dlsym(RTLD_DEFAULT, "openblas_get_num_threads") != nullptr;
  // With OpenBLAS, a piece on another thread; without it (the wheel's MKL) the work is one piece.
  if (openblas) {
    CHECK_THROWS_WITH(parallel_over_blas_threads(4,
                                                 [](int64_t begin, int64_t) {
                                                   if (begin > 0) throw std::runtime_error("piece failed");
                                                 }),
                      "piece failed");
  }
  CHECK(blas_threads() == (openblas ? 2 : 1));  // put back
  CHECK_THROWS_WITH(parallel_over_blas_threads(4, [](int64_t, int64_t) { throw std::runtime_error("every piece"); }),
                    "every piece");
}
