#include <catch2/catch.hpp>
#include <cmath>

#include "optim/make_adamw.h"
#include "parallel/grad_buckets.h"
#include "parallel/gradient_sync.h"

using namespace loom;
using parallel::GradientSyncOptions;
using parallel::ParallelParameter;

namespace {

// One process: every group has one rank, so no communicator factory is needed.
struct WorldOfOne {
  parallel::RankGrid grid{parallel::ParallelSizes{1, 1, 1, 1}};
  parallel::ProcessGroups groups{grid, 0, nullptr};
};

// Values that bf16 (8 significant bits) cannot hold, so the masters visibly keep more.
const std::vector<float> kWeight = {1.0f + 1.0f / 1024.0f, -0.3f, 2.5f, 0.1f, -1.7f, 3.14159f};
const std::vector<float> kBias = {0.2f, -0.7f};
// Inputs bf16 holds exactly, so each micro-batch's gradient (the input) and their sum are exact.
const std::vector<float> kInput1 = {0.5f, -1.25f, 2.0f, 0.75f, 3.0f, -0.5f};
const std::vector<float> kInput2 = {1.5f, 0.25f, -4.0f, 0.75f, -1.0f, 2.0f};
const std::vector<float> kBiasInput1 = {1.0f, -2.0f};
const std::vector<float> kBiasInput2 = {0.5f, 6.0f};

torch::Tensor tensor_of(const std::vector<float>& values) {
  return torch::tensor(values);
}

// Forward and backward of one micro-batch: loss = sum(w * x) + sum(b * y), so dw = x and db = y.
void micro_batch(const torch::Tensor& w, const torch::Tensor& b, const std::vector<float>& x,
                 const std::vector<float>& y) {
  const auto dtype = w.scalar_type();
  ((w * tensor_of(x).reshape({2, 3}).to(dtype)).sum() + (b * tensor_of(y).to(dtype)).sum()).backward();
}

}  // namespace

TEST_CASE("gradient sync (bucketed, world 1, bf16): fp32 masters, clipping, unscaling, update into the model",
          "[gradient_sync]") {
  WorldOfOne world;
  GradientSyncOptions options;
  options.model_dtype = torch::kBFloat16;
  options.micro_batches = 2;
  auto sync = parallel::make_gradient_sync(world.groups, options);
  REQUIRE(sync->units() == nullptr);  // bucketed: no ZeRO-3 units

  auto w = tensor_of(kWeight).reshape({2, 3}).requires_grad_(true);
  auto b = tensor_of(kBias).requires_grad_(true);
  sync->attach({{"h.0.mlp.weight", w, 0}, {"h.0.mlp.bias", b}}, {});

  // The model's parameters are now bf16; parameters() are fp32 masters holding the exact values.
  CHECK(w.scalar_type() == torch::kBFloat16);
  CHECK(b.scalar_type() == torch::kBFloat16);
  const auto& params = sync->parameters();
  REQUIRE(params.size() == 2);
  CHECK(params[0].name == "h.0.mlp.weight");
  CHECK(params[0].tp_split_dim == 0);
  CHECK(params[1].name == "h.0.mlp.bias");
  const auto master_w = params[0].tensor;
  const auto master_b = params[1].tensor;
  CHECK(master_w.scalar_type() == torch::kFloat);
  CHECK_FALSE(master_w.is_same(w));
  CHECK(torch::equal(master_w, tensor_of(kWeight).reshape({2, 3})));
  CHECK(torch::equal(master_b, tensor_of(kBias)));
  CHECK(torch::equal(w, master_w.to(torch::kBFloat16)));
  CHECK_FALSE(torch::equal(w.to(torch::kFloat), master_w));  // what bf16 could not hold

  auto optimizer = optim::make_adamw(*sync, {});
  const auto bytes = sync->state_bytes();
  CHECK(bytes.params == 8 * 2);  // the bf16 model
  CHECK(bytes.master == 8 * 4);
  CHECK(bytes.grads == 8 * 4);  // fp32 gradients of the masters

  sync->start_step();
  micro_batch(w, b, kInput1, kBiasInput1);
  micro_batch(w, b, kInput2, kBiasInput2);
  sync->finish_backward();
  // Each micro-batch's gradient went into the master's fp32 gradient; the model keeps none.
  CHECK_FALSE(w.grad().defined());
  std::vector<double> grads;
  for (size_t i = 0; i < kInput1.size(); ++i) grads.push_back(kInput1[i] + kInput2[i]);
  for (size_t i = 0; i < kBiasInput1.size(); ++i) grads.push_back(kBiasInput1[i] + kBiasInput2[i]);
  REQUIRE(master_w.grad().defined());
  CHECK(master_w.grad().scalar_type() == torch::kFloat);
  CHECK(torch::equal(master_w.grad(), (tensor_of(kInput1) + tensor_of(kInput2)).reshape({2, 3})));
  CHECK(torch::equal(master_b.grad(), tensor_of(kBiasInput1) + tensor_of(kBiasInput2)));

  // fp16's unscaling divides by the loss scale (here 4: exact in binary).
  sync->unscale(0.25);
  for (auto& g : grads) g *= 0.25;
  CHECK(torch::equal(master_w.grad(), (tensor_of(kInput1) + tensor_of(kInput2)).reshape({2, 3}) * 0.25));

  double sum_sq = 0;
  for (double g : grads) sum_sq += g * g;
  const double norm = std::sqrt(sum_sq);
  const auto before_clip = master_w.grad().clone();
  CHECK(sync->clip(0.0) == Approx(norm).epsilon(1e-12));  // 0: measure only
  CHECK(sync->clip(10 * norm) == Approx(norm).epsilon(1e-12));
  CHECK(torch::equal(master_w.grad(), before_clip));
  CHECK(sync->clip(norm / 4) == Approx(norm).epsilon(1e-12));
  CHECK(torch::allclose(master_w.grad(), before_clip / 4, 1e-6, 0));
  CHECK(sync->clip(0.0) == Approx(norm / 4).epsilon(1e-6));

  // AdamW's first step moves each master by lr against its gradient's sign (m / sqrt(v) = g / |g|).
  const auto old_master = master_w.clone();
  const auto old_model = w.detach().clone();
  optimizer->step(0.125);
  CHECK(torch::allclose(master_w, old_master - 0.125 * torch::sign(before_clip), 0, 1e-6));
  CHECK(torch::equal(w, old_model));  // the model waits for after_update()
  sync->after_update();
  CHECK(w.scalar_type() == torch::kBFloat16);
  CHECK(torch::equal(w, master_w.to(torch::kBFloat16)));
  CHECK_FALSE(torch::equal(w, old_model));
  CHECK(torch::equal(b, master_b.to(torch::kBFloat16)));
}

TEST_CASE("gradient sync (bucketed, world 1, fp32): the model's own parameters, clipped in place", "[gradient_sync]") {
  WorldOfOne world;
  auto sync = parallel::make_gradient_sync(world.groups, GradientSyncOptions{});
  auto w = tensor_of(kWeight).reshape({2, 3}).requires_grad_(true);
  auto b = tensor_of(kBias).requires_grad_(true);
  // A tied copy (the output layer's view of the embedding on another stage) is counted once, at its owner.
  auto tied = torch::tensor({100.0f}).requires_grad_(true);
  ParallelParameter copy{"lm_head.weight", tied};
  copy.tied_copy = true;
  sync->attach({{"h.0.w", w}, {"h.0.b", b}, copy}, {});
  const auto& params = sync->parameters();
  REQUIRE(params.size() == 3);
  CHECK(params[0].tensor.is_same(w));
  CHECK(params[2].tensor.is_same(tied));
  auto optimizer = optim::make_adamw(*sync, {});
  CHECK(sync->state_bytes().master == 0);
  CHECK(sync->state_bytes().params == 9 * 4);

  sync->start_step();
  micro_batch(w, b, kInput1, kBiasInput1);
  (tied * 3.0f).sum().backward();
  sync->finish_backward();
  CHECK(torch::equal(w.grad(), tensor_of(kInput1).reshape({2, 3})));
  double sum_sq = 0;
  for (float g : kInput1) sum_sq += double(g) * g;
  for (float g : kBiasInput1) sum_sq += double(g) * g;
  const double norm = std::sqrt(sum_sq);  // without the tied copy's 3
  CHECK(sync->clip(1.0) == Approx(norm).epsilon(1e-12));
  CHECK(tied.grad().item<float>() == Approx(3.0 / norm).epsilon(1e-5));  // scaled with the rest
  CHECK(torch::allclose(w.grad(), tensor_of(kInput1).reshape({2, 3}) / norm, 1e-5, 0));
  const auto old = w.detach().clone();
  optimizer->step(0.125);
  sync->after_update();
  CHECK(torch::allclose(w, old - 0.125 * torch::sign(tensor_of(kInput1).reshape({2, 3})), 0, 1e-6));
}

TEST_CASE("bucket plan: the last parameters first, each bucket within its bytes, a marked parameter alone",
          "[gradient_sync]") {
  using Plan = std::vector<std::vector<size_t>>;
  const std::vector<int64_t> bytes{4, 4, 4, 4};
  CHECK(parallel::GradientBuckets::plan(bytes, 8) == Plan{{3, 2}, {1, 0}});
  CHECK(parallel::GradientBuckets::plan(bytes, 0) == Plan{{3, 2, 1, 0}});
  // The tied embedding (first in use) alone: the same offset, in a bucket of the same size, in the
  // first and last stages, whatever its neighbours there.
  CHECK(parallel::GradientBuckets::plan(bytes, 8, {true, false, false, false}) == Plan{{3, 2}, {1}, {0}});
  // ... and the bucket being filled goes on past it (the last stage's final norm joins its blocks).
  CHECK(parallel::GradientBuckets::plan(bytes, 0, {false, true, false, false}) == Plan{{3, 2, 0}, {1}});
  CHECK(parallel::GradientBuckets::plan(bytes, 0, {false, false, false, true}) == Plan{{3}, {2, 1, 0}});
  CHECK(parallel::GradientBuckets::plan(bytes, 8, {false, false, true, false}) == Plan{{3, 1}, {2}, {0}});
}
