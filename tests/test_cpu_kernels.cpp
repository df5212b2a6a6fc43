#include <ATen/Parallel.h>

#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "core/cpu_threads.h"
#include "models/gelu.h"
#include "models/rms_norm_cpu.h"
#include "models/swiglu.h"
#include "optim/adamw.h"

using namespace loom;

namespace {

// The pool's thread count for one scope (these tests compare 1 and 2 threads).
class PoolThreads {
 public:
  explicit PoolThreads(int n) : before_(at::get_num_threads()) { at::set_num_threads(n); }
  ~PoolThreads() { at::set_num_threads(before_); }

 private:
  int before_;
};

// FN() (a forward and backward, returning the tensors to compare) on a pool of 1, then of 2 threads.
template <typename Fn>
std::array<std::vector<torch::Tensor>, 2> on_1_and_2_threads(const Fn& fn) {
  std::array<std::vector<torch::Tensor>, 2> runs;
  for (int threads : {1, 2}) {
    PoolThreads scope(threads);
    runs[threads - 1] = fn();
  }
  return runs;
}

// Each tensor of the two runs the same to the bit.
void check_same_bits(const std::array<std::vector<torch::Tensor>, 2>& runs) {
  for (size_t i = 0; i < runs[0].size(); ++i) CHECK(torch::equal(runs[0][i], runs[1][i]));
}

// The textbook composition, each query head reading kv head j / group.
torch::Tensor reference_attention(const torch::Tensor& q, torch::Tensor k, torch::Tensor v) {
  const int64_t group = q.size(1) / k.size(1), s = q.size(2);
  k = k.repeat_interleave(group, 1), v = v.repeat_interleave(group, 1);
  auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(3)));
  scores = scores.masked_fill(torch::ones({s, s}, torch::kBool).triu(1), -std::numeric_limits<double>::infinity());
  return torch::matmul(torch::softmax(scores, -1), v);
}

// What models/self_attention.cpp calls on CPU.
torch::Tensor fused_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true, std::nullopt,
                                          /*enable_gqa=*/q.size(1) != k.size(1));
}

struct Result {
  torch::Tensor out, grad_q, grad_k, grad_v;
};

template <typename Fn>
Result run_attention(Fn fn, const torch::Tensor& q0, const torch::Tensor& k0, const torch::Tensor& v0,
                     const torch::Tensor& grad_out) {
  auto q = q0.detach().clone().requires_grad_(true), k = k0.detach().clone().requires_grad_(true),
       v = v0.detach().clone().requires_grad_(true);
  auto out = fn(q, k, v);
  out.backward(grad_out);
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

}  // namespace

TEST_CASE("the CPU attention kernel equals the textbook composition, kv groups included, on any thread count",
          "[kernels]") {
  torch::manual_seed(7);
  // S = 150: the kernel's query and key blocks do not divide it; d = 8: 1/sqrt(8) is not a power of two.
  for (int64_t kv_heads : {6, 2}) {
    auto q = torch::randn({2, 6, 150, 8}), k = torch::randn({2, kv_heads, 150, 8}),
         v = torch::randn({2, kv_heads, 150, 8}), grad = torch::randn({2, 6, 150, 8});
    const auto want = run_attention(reference_attention, q, k, v, grad);
    Result got[2];
    for (int threads : {1, 2}) {
      PoolThreads scope(threads);
      got[threads - 1] = run_attention(fused_attention, q, k, v, grad);
      CHECK(max_diff(got[threads - 1].out, want.out) < 1e-5);
      CHECK(max_diff(got[threads - 1].grad_q, want.grad_q) < 1e-5);
      CHECK(max_diff(got[threads - 1].grad_k, want.grad_k) < 1e-5);
      CHECK(max_diff(got[threads - 1].grad_v, want.grad_v) < 1e-5);
    }
    // A layout that gives a rank fewer threads gets the same bits.
    CHECK(torch::equal(got[0].out, got[1].out));
    CHECK(torch::equal(got[0].grad_q, got[1].grad_q));
    CHECK(torch::equal(got[0].grad_k, got[1].grad_k));
    CHECK(torch::equal(got[0].grad_v, got[1].grad_v));
    // Causality: the first position sees only itself, so its context is its own v.
    CHECK(max_diff(got[0].out.select(2, 0), v.repeat_interleave(6 / kv_heads, 1).select(2, 0)) < 1e-6);
  }
}

TEST_CASE("GELU gives the same bits on any number of threads, and LibTorch's values", "[kernels]") {
  torch::manual_seed(3);
  auto x = torch::randn({5, 77, 701});  // 269885 elements: in pieces, the last off the 64-element grid
  auto grad_x = torch::randn({5, 77, 701});
  const auto runs = on_1_and_2_threads([&] {
    auto input = x.clone().requires_grad_(true);
    auto out = models::gelu_tanh(input);
    out.backward(grad_x);
    return std::vector<torch::Tensor>{out, input.grad()};
  });
  check_same_bits(runs);
  // LibTorch's gelu on one thread (one piece: no thread's cut) is the same function.
  PoolThreads one(1);
  auto input = x.clone().requires_grad_(true);
  auto want = torch::gelu(input, "tanh");
  want.backward(grad_x);
  CHECK(torch::equal(runs[1][0], want.detach()));
  CHECK(torch::equal(runs[1][1], input.grad()));
}

TEST_CASE("RMSNorm on the CPU gives LibTorch's values and gradients, the same bits on any number of threads",
          "[kernels]") {
  torch::manual_seed(11);
  // Widths with and without a tail off the eight running sums; rows in one block, and in several
  // with a part block (64 rows a block).
  for (auto shape :
       {std::vector<int64_t>{3, 5, 7}, std::vector<int64_t>{130, 64}, std::vector<int64_t>{2, 150, 4, 37}}) {
    auto x = torch::randn(shape) * 3 + 0.5, grad_y = torch::randn(shape);
    auto w0 = torch::rand({shape.back()}) + 0.5;
    const auto runs = on_1_and_2_threads([&] {
      auto input = x.clone().requires_grad_(true), weight = w0.clone().requires_grad_(true);
      auto y = models::rms_norm_cpu(input, weight, 1e-6);
      y.backward(grad_y);
      return std::vector<torch::Tensor>{y, input.grad(), weight.grad()};
    });
    check_same_bits(runs);
    auto input = x.clone().requires_grad_(true), weight = w0.clone().requires_grad_(true);
    auto want = at::rms_norm(input, {shape.back()}, weight, 1e-6);
    want.backward(grad_y);
    CHECK(max_diff(runs[0][0], want) < 1e-5);
    CHECK(max_diff(runs[0][1], input.grad()) < 1e-5);
    CHECK(max_diff(runs[0][2], weight.grad()) < 1e-5 * static_cast<double>(x.numel() / shape.back()));
  }
  // A second derivative (create_graph) equals LibTorch's.
  {
    auto x = torch::randn({6, 5}), grad_y = torch::randn({6, 5});
    auto second = [&](bool own) {
      auto input = x.clone().requires_grad_(true), weight = (torch::rand({5}) * 0 + 1.3).requires_grad_(true);
      auto y = own ? models::rms_norm_cpu(input, weight, 1e-6) : at::rms_norm(input, {5}, weight, 1e-6);
      auto grads = torch::autograd::grad({y}, {input, weight}, {grad_y}, /*retain_graph=*/true, /*create_graph=*/true);
      (grads[0].pow(2).sum() + grads[1].pow(2).sum()).backward();
      return std::vector<torch::Tensor>{grads[0].detach(), input.grad(), weight.grad()};
    };
    const auto own = second(true), libtorch = second(false);
    for (size_t i = 0; i < own.size(); ++i) CHECK(max_diff(own[i], libtorch[i]) < 1e-5);
  }
  // Only the input wants a gradient (a frozen weight), and no rows at all.
  auto input = torch::randn({4, 9}).requires_grad_(true);
  models::rms_norm_cpu(input, torch::ones({9}), 1e-6).sum().backward();
  CHECK(input.grad().defined());
  CHECK(models::rms_norm_cpu(torch::zeros({0, 9}), torch::ones({9}), 1e-6).numel() == 0);
}

TEST_CASE("SwiGLU of one [rows, 2F] tensor gives the halves' values and one gradient, the same bits on any threads",
          "[kernels]") {
  torch::manual_seed(12);
  for (int64_t width : {128, 37}) {
    auto gate_up = torch::randn({300, 2 * width}) * 2, grad_y = torch::randn({300, width});
    const auto runs = on_1_and_2_threads([&] {
      auto input = gate_up.clone().requires_grad_(true);
      auto y = models::swiglu_halves(input);
      y.backward(grad_y);
      return std::vector<torch::Tensor>{y, input.grad()};
    });
    check_same_bits(runs);
    auto input = gate_up.clone().requires_grad_(true);
    auto want = torch::silu(input.narrow(1, 0, width)) * input.narrow(1, width, width);
    want.backward(grad_y);
    CHECK(max_diff(runs[0][0], want) < 1e-5);
    CHECK(max_diff(runs[0][1], input.grad()) < 1e-5);
  }
  // No second derivative: said, not a gradient without its graph.
  auto input = torch::randn({4, 8}).requires_grad_(true);
  auto y = models::swiglu_halves(input);
  CHECK_THROWS_WITH(torch::autograd::grad({y}, {input}, {torch::ones({4, 4})}, true, /*create_graph=*/true),
                    Catch::Contains("no second derivative"));
}

TEST_CASE("the fused AdamW update gives the same bits on any number of threads", "[kernels]") {
  torch::manual_seed(5);
  const int64_t n = 3 * (1 << 18) + 1001;  // three whole pieces and a part piece
  auto p0 = torch::randn({n}), g = torch::randn({n}), m0 = torch::randn({n}) * 0.1, v0 = torch::rand({n}) * 0.01;
  torch::Tensor p[2], m[2], v[2];
  for (int threads : {1, 2}) {
    PoolThreads scope(threads);
    p[threads - 1] = p0.clone(), m[threads - 1] = m0.clone(), v[threads - 1] = v0.clone();
    optim::adamw_update(p[threads - 1], g, m[threads - 1], v[threads - 1], /*decay=*/true, 1e-3, 3,
                        optim::AdamWOptions{0.9, 0.95, 1e-8, 0.1});
  }
  CHECK(torch::equal(p[0], p[1]));
  CHECK(torch::equal(m[0], m[1]));
  CHECK(torch::equal(v[0], v[1]));
  CHECK_FALSE(torch::equal(p[0], p0));  // it did update
}

TEST_CASE("an exception in a piece of parallel work reaches the caller", "[kernels]") {
  PoolThreads scope(2);
  CHECK_THROWS_WITH(parallel_over_threads(4,
                                          [](int64_t begin, int64_t) {
                                            if (begin > 0) throw std::runtime_error("piece failed");
                                          }),
                    "piece failed");
  CHECK(at::get_num_threads() == 2);
  CHECK_THROWS_WITH(parallel_over_threads(4, [](int64_t, int64_t) { throw std::runtime_error("every piece"); }),
                    "every piece");
}
