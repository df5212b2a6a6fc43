#include <catch2/catch.hpp>
#include <cmath>

#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "parallel/communicator.h"
#include "parallel/grad_clip.h"

using namespace loom;

TEST_CASE("AdamW takes the hand-computed first and second steps", "[optim]") {
  auto w = torch::tensor({{1.0f, -2.0f}}).requires_grad_(true);  // decayed (2-D)
  auto b = torch::tensor({0.5f}).requires_grad_(true);           // not decayed (1-D)
  optim::AdamW adam({w, b}, {0.9, 0.95, 1e-8, 0.1});
  w.mutable_grad() = torch::tensor({{0.1f, -0.3f}});
  b.mutable_grad() = torch::tensor({0.2f});
  adam.step(0.01);
  // Step 1: m = 0.1 g, v = 0.05 g^2, so m_hat / sqrt(v_hat) = sign(g):
  // w <- w (1 - lr wd) - lr sign(g);  b <- b - lr sign(g).
  CHECK(w[0][0].item<double>() == Approx(1.0 * (1 - 0.001) - 0.01).epsilon(1e-6));
  CHECK(w[0][1].item<double>() == Approx(-2.0 * (1 - 0.001) + 0.01).epsilon(1e-6));
  CHECK(b[0].item<double>() == Approx(0.5 - 0.01).epsilon(1e-6));

  b.mutable_grad() = torch::tensor({-0.4f});
  adam.step(0.01);
  const double m = 0.9 * 0.02 + 0.1 * -0.4;           // 0.9 m1 + 0.1 g2
  const double v = 0.95 * 0.05 * 0.04 + 0.05 * 0.16;  // 0.95 v1 + 0.05 g2^2
  const double update = (m / (1 - 0.81)) / (std::sqrt(v / (1 - 0.9025)) + 1e-8);
  CHECK(b[0].item<double>() == Approx(0.49 - 0.01 * update).epsilon(1e-6));
  CHECK(adam.steps_taken() == 2);
}

TEST_CASE("AdamW over its flat buffers updates exactly as tensor by tensor", "[optim]") {
  torch::manual_seed(3);
  const std::vector<std::vector<int64_t>> shapes{{4, 8}, {8}, {8, 3}, {3}, {600, 500}};
  std::vector<torch::Tensor> flat_side, tensor_side;
  for (const auto& shape : shapes) {
    auto t = torch::randn(shape);
    flat_side.push_back(t.clone().requires_grad_(true));
    tensor_side.push_back(t.clone().requires_grad_(true));
  }
  const optim::AdamWOptions options{0.9, 0.95, 1e-8, 0.1};
  optim::AdamW flat(flat_side, options), tensors(tensor_side, options);
  flat.use_flat_gradients();
  REQUIRE(flat.flat());
  // Matrices first, then vectors, back to back in one buffer.
  const auto* base = static_cast<const char*>(flat_side[0].data_ptr());
  CHECK(static_cast<const char*>(flat_side[2].data_ptr()) == base + 32 * sizeof(float));
  CHECK(static_cast<const char*>(flat_side[4].data_ptr()) == base + 56 * sizeof(float));
  CHECK(static_cast<const char*>(flat_side[1].data_ptr()) == base + (56 + 300000) * sizeof(float));
  CHECK(static_cast<const char*>(flat_side[1].grad().data_ptr()) -
            static_cast<const char*>(flat_side[0].grad().data_ptr()) ==
        (56 + 300000) * static_cast<int64_t>(sizeof(float)));
  for (int step = 0; step < 3; ++step) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      auto g = torch::randn(shapes[i]);
      {
        torch::NoGradGuard no_grad;
        flat_side[i].mutable_grad().copy_(g);  // into the flat buffer, as autograd accumulates
      }
      tensor_side[i].mutable_grad() = g.clone();  // a gradient of its own: the tensor-by-tensor path
    }
    flat.step(1e-2);
    tensors.step(1e-2);
    flat.zero_grad();
  }
  for (size_t i = 0; i < shapes.size(); ++i) {
    CHECK(torch::equal(flat_side[i], tensor_side[i]));
    CHECK(torch::equal(flat.moments(i).first, tensors.moments(i).first));
    CHECK(torch::equal(flat.moments(i).second, tensors.moments(i).second));
    CHECK(flat_side[i].grad().abs().sum().item<double>() == 0.0);
  }
  CHECK(flat.state_bytes() == tensors.state_bytes());
}

TEST_CASE("AdamW leaves parameters that share a storage where they are", "[optim]") {
  auto whole = torch::zeros({2, 3});
  auto a = whole[0], b = whole[1];  // two views of one buffer: flattening would cut the tie
  optim::AdamW adam({a, b}, {0.9, 0.95, 1e-8, 0.0});
  CHECK_FALSE(adam.flat());
  adam.use_flat_gradients();  // nothing to lay out
  CHECK_FALSE(a.grad().defined());
  a.mutable_grad() = torch::ones({3});
  b.mutable_grad() = -torch::ones({3});
  adam.step(0.1);
  CHECK(whole[0][0].item<double>() == Approx(-0.1).epsilon(1e-5));
  CHECK(whole[1][2].item<double>() == Approx(0.1).epsilon(1e-5));
}

TEST_CASE("warm-up then cosine decay to min_lr", "[optim]") {
  optim::LrSchedule s{1.0, 0.1, 4, 10};
  CHECK(s.at(0) == Approx(0.25));
  CHECK(s.at(3) == Approx(1.0));
  CHECK(s.at(4) == Approx(1.0));
  CHECK(s.at(9) == Approx(0.1 + 0.45 * (1 + std::cos(M_PI * 5.0 / 9.0))));
  CHECK(s.at(13) == Approx(0.1));
  optim::LrSchedule no_warmup{1.0, 0.0, 0, 3};
  CHECK(no_warmup.at(0) == Approx(1.0));
  CHECK(no_warmup.at(2) == Approx(0.0).margin(1e-12));
}

TEST_CASE("Megatron-LM's decay styles: linear, constant, wsd; min_lr after the decay", "[optim]") {
  using loom::LrDecayStyle;
  const optim::LrSchedule linear{1.0, 0.1, 2, 10, LrDecayStyle::linear};
  CHECK(linear.at(1) == Approx(1.0));
  CHECK(linear.at(2) == Approx(1.0));
  CHECK(linear.at(2 + 3) == Approx(1.0 - 0.9 * 3.0 / 9.0));
  CHECK(linear.at(11) == Approx(0.1));
  CHECK(linear.at(50) == Approx(0.1));  // past the decay: min_lr
  const optim::LrSchedule constant{1.0, 0.1, 2, 10, LrDecayStyle::constant};
  CHECK(constant.at(0) == Approx(0.5));
  CHECK(constant.at(50) == Approx(1.0));
  const optim::LrSchedule wsd{1.0, 0.1, 2, 10, LrDecayStyle::wsd, 4};  // stable for steps 2-7, anneal 8-11
  CHECK(wsd.at(7) == Approx(1.0));
  CHECK(wsd.at(8) == Approx(1.0));
  CHECK(wsd.at(9) == Approx(1.0 - 0.9 / 3.0));
  CHECK(wsd.at(11) == Approx(0.1));
  const optim::LrSchedule wsd_one{1.0, 0.1, 2, 10, LrDecayStyle::wsd, 1};  // a one-step anneal still ends at min_lr
  CHECK(wsd_one.at(10) == Approx(1.0));
  CHECK(wsd_one.at(11) == Approx(0.1));
  // An explicit decay length does not move when the run gets longer: extending a run keeps its schedule.
  const optim::LrSchedule cosine{1.0, 0.1, 2, 10};
  CHECK(cosine.at(6) == Approx(0.1 + 0.45 * (1 + std::cos(M_PI * 4.0 / 9.0))));
  CHECK(cosine.at(30) == Approx(0.1));
}

TEST_CASE("clipping scales gradients to the global norm", "[optim]") {
  auto stats = std::make_shared<parallel::CommStats>();
  parallel::SelfCommunicator self("model-parallel", 0, stats);
  auto a = torch::zeros({2}).requires_grad_(true), b = torch::zeros({1}).requires_grad_(true);
  a.mutable_grad() = torch::tensor({3.0f, 0.0f});
  b.mutable_grad() = torch::tensor({4.0f});
  std::vector<parallel::ParallelParameter> params{{"a", a}, {"b", b}};
  CHECK(parallel::clip_grad_norm(params, 10.0, self, 0) == Approx(5.0));
  CHECK(a.grad()[0].item<double>() == Approx(3.0));
  CHECK(parallel::clip_grad_norm(params, 1.0, self, 0) == Approx(5.0));
  CHECK(a.grad()[0].item<double>() == Approx(0.6).epsilon(1e-5));
  CHECK(b.grad()[0].item<double>() == Approx(0.8).epsilon(1e-5));
}
