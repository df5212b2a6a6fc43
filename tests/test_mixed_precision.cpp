#include <catch2/catch.hpp>

#include "core/precision.h"
#include "optim/loss_scaler.h"
#include "parallel/master_weights.h"

using namespace loom;

TEST_CASE("dynamic loss scale halves on overflow, floors at min, grows after a clean window", "[mixed]") {
  optim::LossScaler scaler({0.0, 1024.0, 3, 256.0});
  CHECK(scaler.scale() == 1024.0);
  CHECK(scaler.update(true));  // skipped
  CHECK(scaler.scale() == 512.0);
  CHECK(scaler.update(true));
  CHECK(scaler.update(true));
  CHECK(scaler.scale() == 256.0);  // not below min
  CHECK_FALSE(scaler.update(false));
  CHECK_FALSE(scaler.update(false));
  CHECK(scaler.scale() == 256.0);
  CHECK_FALSE(scaler.update(false));  // third clean step in a row
  CHECK(scaler.scale() == 512.0);
  CHECK(scaler.skipped_steps() == 3);
  // An overflow restarts the window.
  scaler.update(false);
  scaler.update(true);
  scaler.update(false);
  scaler.update(false);
  CHECK(scaler.scale() == 256.0);
}

TEST_CASE("a fixed loss scale never changes but still skips overflowing steps", "[mixed]") {
  optim::LossScaler scaler({128.0, 65536.0, 1, 1.0});
  CHECK(scaler.update(true));
  CHECK_FALSE(scaler.update(false));
  CHECK(scaler.scale() == 128.0);
}

TEST_CASE("master weights: bf16 model copies, fp32 gradient accumulation, rounding back", "[mixed]") {
  auto w = torch::tensor({1.0f + 1.0f / 1024.0f, -3.0f}).requires_grad_(true);
  parallel::MasterWeights master({w}, torch::kBFloat16);
  const auto& m = master.masters()[0];
  CHECK(w.scalar_type() == torch::kBFloat16);
  CHECK(m.scalar_type() == torch::kFloat);
  CHECK_FALSE(m.requires_grad());
  CHECK(m[0].item<float>() == 1.0f + 1.0f / 1024.0f);  // the master keeps what bf16 cannot hold
  CHECK(w[0].item<float>() == 1.0f);
  CHECK(master.master_of(w).is_same(m));
  std::vector<size_t> heard;
  master.set_listener([&](size_t i) { heard.push_back(i); });
  // Two micro-batches: each gradient lands in the fp32 master and leaves the model's copy.
  for (int micro = 0; micro < 2; ++micro) {
    auto x = torch::tensor({0.001f, 1.0f}).to(torch::kBFloat16);
    (w * x).sum().backward();
    CHECK_FALSE(w.grad().defined());
  }
  CHECK(heard == std::vector<size_t>{0, 0});
  CHECK(m.grad().scalar_type() == torch::kFloat);
  CHECK(m.grad()[1].item<float>() == 2.0f);
  CHECK(m.grad()[0].item<float>() == Approx(2 * 0.001f).epsilon(0.01));
  CHECK(master.model_bytes() == 4);
  CHECK(master.master_bytes() == 8);
  {
    torch::NoGradGuard no_grad;
    m.add_(torch::tensor({1.0f, 0.5f}));
  }
  master.copy_to_model();
  CHECK(w[0].item<float>() == 2.0f);
  CHECK(w[1].item<float>() == -2.5f);
}

TEST_CASE("parameters are cast to the activation's dtype at use", "[mixed]") {
  auto param = torch::ones({2}, torch::kHalf);
  CHECK(cast_to_activation(param, torch::zeros({1})).scalar_type() == torch::kFloat);
  auto same = torch::ones({2});
  CHECK(cast_to_activation(same, torch::zeros({1})).is_same(same));
  CHECK(Precision::of(loom::TrainPrecision::bf16).activations == torch::kBFloat16);
  CHECK(Precision::of(loom::TrainPrecision::fp16).params == torch::kHalf);
  CHECK(Precision::of(loom::TrainPrecision::fp16).loss_scaling());
  CHECK_FALSE(Precision::of(loom::TrainPrecision::fp32).mixed());
}
