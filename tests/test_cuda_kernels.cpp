// loom's CUDA kernels (core/cuda_kernels.h) against LibTorch's composed kernels, on a GPU: the
// fused cross-entropy against at::cross_entropy_loss on the fp32 logits, and the fused SwiGLU
// against the CPU's (models/swiglu.cpp), whose roundings it copies. On a machine without a GPU
// they check only that the CPU keeps LibTorch's path; bench/gpu/check.sh runs them on the GPU
// with LOOM_REQUIRE_GPU=1, where a missing GPU or missing kernels fail them.
#include <catch2/catch.hpp>
#include <cstdlib>

#include "core/cuda_backend.h"
#include "core/cuda_kernel_args.h"
#include "core/cuda_kernels.h"
#include "models/rotary.h"
#include "models/swiglu.h"
#include "parallel/fused_cross_entropy.h"
#include "parallel/weighted_combine.h"

using namespace loom;

namespace {

// Whether a GPU is here to run the kernels on (and LibTorch's CUDA half loaded for it).
bool gpu_here() {
  const bool required = std::getenv("LOOM_REQUIRE_GPU") && std::string(std::getenv("LOOM_REQUIRE_GPU")) == "1";
  if (cuda_runtime_device_count() <= 0) {
    if (required) FAIL("LOOM_REQUIRE_GPU=1 and the CUDA runtime sees no GPU");
    WARN("no GPU here: the CUDA kernels are not run (bench/gpu/check.sh runs them)");
    return false;
  }
  const std::string error = load_torch_cuda();
  REQUIRE(error.empty());
  REQUIRE(cuda::cuda_kernels_built());
  return true;
}

// max |a - b| / (atol + rtol |b|), a and b as fp64 on the CPU: at most 1 passes.
double worst(const torch::Tensor& a, const torch::Tensor& b, double rtol, double atol) {
  auto x = a.cpu().to(torch::kDouble), y = b.cpu().to(torch::kDouble);
  return ((x - y).abs() / (atol + rtol * y.abs())).max().item<double>();
}

}  // namespace

TEST_CASE("the fused cross-entropy on the CPU is not taken", "[cuda]") {
  CHECK_FALSE(parallel::fused_cross_entropy_takes(torch::zeros({2, 3})));
  CHECK_FALSE(parallel::fused_cross_entropy_takes(torch::zeros({2, 3}, torch::kBFloat16)));
}

TEST_CASE("fused cross-entropy on a GPU: LibTorch's loss and gradient from the fp32 logits", "[cuda]") {
  if (!gpu_here()) return;
  const torch::Device gpu(torch::kCUDA, 0);
  // Vocabularies whose rows start on a 16-byte boundary (1024, 128256) and ones that do not (1000,
  // 50257: a head and a tail around the vector loads), in each storage type.
  for (const auto dtype : {torch::kFloat, torch::kBFloat16, torch::kHalf}) {
    for (const int64_t vocab : {1000, 1024, 50257, 128256}) {
      CAPTURE(dtype, vocab);
      torch::manual_seed(vocab);
      const int64_t rows = 37;
      auto logits = (torch::randn({rows, vocab}) * 4).to(dtype).to(gpu).requires_grad_(true);
      auto targets = torch::randint(vocab, {rows}, torch::kLong);
      targets[3] = -100;  // ignored: loss 0 and no gradient
      targets[5] = vocab - 1;
      targets[6] = 0;
      targets = targets.to(gpu);
      auto weights = torch::rand({rows}).to(gpu);  // the loss's gradient differs per row

      auto loss = parallel::fused_cross_entropy(logits, targets);
      REQUIRE(loss.scalar_type() == torch::kFloat);
      (loss * weights).sum().backward();
      auto grad = logits.grad().clone();
      REQUIRE(grad.scalar_type() == dtype);
      logits.mutable_grad().reset();

      auto wide = logits.detach().to(torch::kFloat).requires_grad_(true);
      auto expected = at::cross_entropy_loss(wide, targets, {}, at::Reduction::None);
      (expected * weights).sum().backward();

      CHECK(worst(loss, expected, 1e-5, 1e-6) <= 1);
      CHECK(loss[3].item<float>() == 0.f);
      CHECK(grad[3].abs().max().item<float>() == 0.f);
      // The gradient rounds once to the storage type: within half an ulp of it (and fp32's sums).
      const double rtol = dtype == torch::kFloat ? 1e-5 : (dtype == torch::kHalf ? 1e-3 : 8e-3);
      CHECK(worst(grad, wide.grad(), rtol, 1e-7) <= 1);
    }
  }
}

TEST_CASE("fused cross-entropy on a GPU: a target outside the vocabulary gives NaN", "[cuda]") {
  if (!gpu_here()) return;
  const torch::Device gpu(torch::kCUDA, 0);
  auto logits = torch::randn({3, 64}).to(torch::kBFloat16).to(gpu);
  auto targets = torch::tensor({1, 64, -1}, torch::kLong).to(gpu);
  auto loss = parallel::fused_cross_entropy(logits, targets).cpu();
  CHECK(std::isfinite(loss[0].item<float>()));
  CHECK(std::isnan(loss[1].item<float>()));
  CHECK(std::isnan(loss[2].item<float>()));
}

TEST_CASE("fused SwiGLU on a GPU rounds as the CPU's", "[cuda]") {
  if (!gpu_here()) return;
  const torch::Device gpu(torch::kCUDA, 0);
  for (const auto dtype : {torch::kFloat, torch::kBFloat16, torch::kHalf}) {
    for (const int64_t n : {8 * 4096, 8 * 4096 + 5}) {  // whole vectors, and a tail
      CAPTURE(dtype, n);
      torch::manual_seed(n);
      auto gate_cpu = (torch::randn({n}) * 3).to(dtype), up_cpu = torch::randn({n}).to(dtype);
      auto dy_cpu = torch::randn({n}).to(dtype);
      auto gate = gate_cpu.to(gpu).requires_grad_(true), up = up_cpu.to(gpu).requires_grad_(true);
      auto out = models::swiglu(gate, up);
      out.backward(dy_cpu.to(gpu));

      auto g = gate_cpu.clone().requires_grad_(true), u = up_cpu.clone().requires_grad_(true);
      auto expected = models::swiglu(g, u);
      expected.backward(dy_cpu);

      // The same roundings: equal but where the two machines' exp differ in the last fp32 bit and
      // that moves a 16-bit rounding (one ulp, rarely).
      // In fp32 the two sides differ by their exp's last bits alone (the project's 1e-5).
      const bool wide = dtype == torch::kFloat;
      const double rtol = wide ? 1e-5 : (dtype == torch::kHalf ? 1e-3 : 8e-3);
      for (const auto& [got, want] :
           {std::pair{out, expected}, std::pair{gate.grad(), g.grad()}, std::pair{up.grad(), u.grad()}}) {
        CHECK(worst(got, want, rtol, wide ? 1e-5 : 1e-6) <= 1);
        if (!wide) CHECK((got.cpu() == want).to(torch::kDouble).mean().item<double>() >= 0.99);
      }
    }
  }
}

TEST_CASE("fp32 += bf16 on a GPU: LibTorch's add_ bit for bit", "[cuda]") {
  if (!gpu_here()) return;
  const torch::Device gpu(torch::kCUDA, 0);
  for (const auto dtype : {torch::kFloat, torch::kBFloat16, torch::kHalf}) {
    for (const int64_t n : {int64_t{1} << 20, (int64_t{1} << 20) + 3}) {
      CAPTURE(dtype, n);
      auto sum = torch::randn({n}).to(gpu), grad = torch::randn({n}).to(dtype).to(gpu);
      auto expected = sum.clone().add_(grad);
      cuda::accumulate_fp32(sum.data_ptr<float>(), grad.data_ptr(), n, *cuda::storage_of(dtype),
                            cuda::current_stream(gpu));
      CHECK(torch::equal(sum, expected));
      // A source one element off 16-byte alignment takes the element-by-element path.
      auto offset = grad.narrow(0, 1, n - 1);
      auto sum_offset = sum.narrow(0, 0, n - 1).clone();
      auto expected_offset = sum_offset.clone().add_(offset);
      cuda::accumulate_fp32(sum_offset.data_ptr<float>(), offset.data_ptr(), n - 1, *cuda::storage_of(dtype),
                            cuda::current_stream(gpu));
      CHECK(torch::equal(sum_offset, expected_offset));
    }
  }
}

TEST_CASE("the rotary embedding on a GPU rounds as the CPU's", "[cuda]") {
  if (!gpu_here()) return;
  const torch::Device gpu(torch::kCUDA, 0);
  const models::RotaryEmbedding rotary(16, 64, 10000.0, RopeScalingConfig{}, /*interleave=*/false);
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    CAPTURE(dtype);
    torch::manual_seed(3);
    // Keys as attention makes them: one of two heads' halves of a [B, S, heads, 2, d] projection
    // (strided), from position 5 on; and positions picked one by one (apply_at).
    const int64_t b = 2, s = 7, heads = 3, d = 16;
    auto packed = torch::randn({b, s, heads, 2, d}).to(dtype);
    auto dy = torch::randn({b, s, heads, d}).to(dtype);
    auto positions = torch::tensor({9, 2, 40, 3, 3, 0, 63}, torch::kLong);
    for (const bool at_positions : {false, true}) {
      CAPTURE(at_positions);
      auto run = [&](const torch::Device& device) {
        // A copy on either device: packed.to(kCPU) would be packed itself, made to require grad.
        auto leaf = packed.clone().to(device).requires_grad_(true);
        auto x = leaf.unbind(3)[0];
        auto y = at_positions ? rotary.apply_at(x, positions.to(device)) : rotary.apply(x, 5);
        y.backward(dy.to(device));
        return std::pair{y.detach().cpu(), leaf.grad().cpu()};
      };
      const auto [y_gpu, grad_gpu] = run(gpu);
      const auto [y_cpu, grad_cpu] = run(torch::kCPU);
      const bool wide = dtype == torch::kFloat;
      CHECK(worst(y_gpu, y_cpu, wide ? 1e-5 : 8e-3, 1e-5) <= 1);
      CHECK(worst(grad_gpu, grad_cpu, wide ? 1e-5 : 8e-3, 1e-5) <= 1);
      if (!wide) {
        CHECK((y_gpu == y_cpu).to(torch::kDouble).mean().item<double>() >= 0.99);
        CHECK((grad_gpu == grad_cpu).to(torch::kDouble).mean().item<double>() >= 0.99);
      }
    }
  }
}

TEST_CASE("the MoE combine's kernel is not taken on the CPU", "[cuda]") {
  CHECK_FALSE(parallel::weighted_combine_takes(torch::zeros({8, 4}), torch::zeros({4, 2})));
}

TEST_CASE("the MoE combine on a GPU rounds as the composition on the CPU", "[cuda]") {
  if (!gpu_here()) return;
  const torch::Device gpu(torch::kCUDA, 0);
  for (const auto dtype : {torch::kFloat, torch::kBFloat16, torch::kHalf}) {
    // Rows of whole 16-byte vectors (2048) and not (100: element by element); one choice to eight.
    for (const auto& [width, k] : {std::pair<int64_t, int64_t>{2048, 4}, {100, 2}, {256, 1}, {64, 8}}) {
      CAPTURE(dtype, width, k);
      torch::manual_seed(width + k);
      const int64_t tokens = 37;
      auto rows_cpu = torch::randn({tokens * k, width}).to(dtype);
      auto weights_cpu = torch::softmax(torch::randn({tokens, k}), 1).to(dtype);
      auto row_of_choice_cpu = torch::randperm(tokens * k, torch::kLong);
      auto dy_cpu = torch::randn({tokens, width}).to(dtype);

      auto rows = rows_cpu.to(gpu).requires_grad_(true), weights = weights_cpu.to(gpu).requires_grad_(true);
      REQUIRE(parallel::weighted_combine_takes(rows, weights));
      auto out = parallel::weighted_combine(rows, row_of_choice_cpu.to(gpu), weights);
      out.backward(dy_cpu.to(gpu));

      // TokenDispatcher::combine's composition: gather each choice's row, weigh it, sum over k.
      auto r = rows_cpu.clone().requires_grad_(true), w = weights_cpu.clone().requires_grad_(true);
      auto expected = (r.index_select(0, row_of_choice_cpu).view({tokens, k, width}) * w.unsqueeze(2)).sum(1);
      expected.backward(dy_cpu);

      const bool wide = dtype == torch::kFloat;
      const double rtol = wide ? 1e-5 : (dtype == torch::kHalf ? 1e-3 : 8e-3);
      CHECK(worst(out, expected, rtol, 1e-5) <= 1);
      // Each row's gradient is one product, rounded once on both sides: equal.
      CHECK(torch::equal(rows.grad().cpu(), r.grad()));
      // The weights' gradients sum WIDTH products in fp32, in another order than the CPU's.
      CHECK(worst(weights.grad(), w.grad(), rtol, 1e-4) <= 1);
      if (!wide) CHECK((out.cpu() == expected).to(torch::kDouble).mean().item<double>() >= 0.99);
    }
  }
}
