// Split backward (parallel/weight_grad_store.h): under a deferral scope a
// backward gives the input's gradient and the biases', the weights' arrive only
// in the W pass, through the same gradient-accumulator hooks, and equal an
// ordinary backward's.
#include <ATen/CPUGeneratorImpl.h>

#include <catch2/catch.hpp>
#include <optional>

#include "check_close.h"
#include "parallel/grad_hooks.h"
#include "parallel/tensor_parallel.h"
#include "parallel/weight_grad_store.h"

using namespace loom::parallel;
using loom::test::check_close;

namespace {

torch::Tensor random(std::vector<int64_t> shape, uint64_t seed) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  return torch::randn(shape, generator);
}

struct TwoLayers {
  SelfCommunicator tp{"tp", 0, std::make_shared<CommStats>()};
  ColumnParallelLinear fc{ColumnParallelLinearOptions(4, 8).name("fc").seed(3), tp};
  RowParallelLinear proj{RowParallelLinearOptions(8, 4).name("proj").seed(3).input_is_parallel(true), tp};
  torch::Tensor loss(const torch::Tensor& x, const torch::Tensor& target) {
    return (proj->forward(torch::gelu(fc->forward(x))) * target).sum();
  }
  std::vector<torch::Tensor> params() { return {fc->weight, fc->bias, proj->weight, proj->bias}; }
};

}  // namespace

TEST_CASE("deferred weight gradients arrive in the W pass and equal an ordinary backward", "[weight_grad_store]") {
  TwoLayers reference, split;
  std::vector<torch::Tensor> reference_input_grads;
  for (int64_t micro = 0; micro < 2; ++micro) {
    auto x = random({2, 3, 4}, 10 + micro).requires_grad_(true);
    reference.loss(x, random({2, 3, 4}, 20 + micro)).backward();
    reference_input_grads.push_back(x.grad());
  }

  auto params = split.params();
  std::vector<int64_t> arrivals(params.size(), 0);
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;
  for (size_t i = 0; i < params.size(); ++i) {
    accumulators.push_back(after_gradient_accumulated(params[i], [&arrivals, i] { ++arrivals[i]; }));
  }
  WeightGradStore store;
  for (int64_t micro = 0; micro < 2; ++micro) {
    auto x = random({2, 3, 4}, 10 + micro).requires_grad_(true);
    {
      DeferWeightGradients deferring(store, {micro, 0});
      split.loss(x, random({2, 3, 4}, 20 + micro)).backward();
    }
    // B: the input's gradient and the biases' are in, the weights' wait.
    check_close(x.grad(), reference_input_grads[static_cast<size_t>(micro)], "input gradient");
    CHECK(arrivals == std::vector<int64_t>{micro, micro + 1, micro, micro + 1});
    CHECK_FALSE(store.empty());
    store.run({micro, 0});
    CHECK(arrivals == std::vector<int64_t>{micro + 1, micro + 1, micro + 1, micro + 1});
    CHECK(store.empty());
  }
  const auto expected = reference.params();
  const char* names[] = {"fc.weight", "fc.bias", "proj.weight", "proj.bias"};
  for (size_t i = 0; i < params.size(); ++i) check_close(params[i].grad(), expected[i].grad(), names[i], 1e-6);
}

TEST_CASE("a weight used through slices and a cast gets their summed gradient once per W pass", "[weight_grad_store]") {
  // Like the shared key-value projection: two slices of one parameter, each a layer's weight.
  auto run = [](bool defer) {
    auto weight = random({6, 4}, 5).requires_grad_(true);
    int64_t arrivals = 0;
    auto accumulator = after_gradient_accumulated(weight, [&arrivals] { ++arrivals; });
    auto x = random({3, 4}, 6).to(torch::kFloat64);
    WeightGradStore store;
    {
      std::optional<DeferWeightGradients> deferring;
      if (defer) deferring.emplace(store, WeightGradStore::Key{0, 0});
      auto k = linear_deferring_weight_grad(x, weight.narrow(0, 0, 3).to(torch::kFloat64));
      auto v = linear_deferring_weight_grad(x, weight.narrow(0, 3, 3).to(torch::kFloat64));
      (k * v).sum().backward();
    }
    CHECK(arrivals == (defer ? 0 : 1));
    store.run({0, 0});
    CHECK(arrivals == 1);
    return weight.grad();
  };
  check_close(run(true), run(false), "sliced weight", 1e-6);
}

TEST_CASE("without a scope, or outside autograd, the layers run torch::linear", "[weight_grad_store]") {
  auto weight = random({3, 4}, 7).requires_grad_(true);
  auto x = random({2, 4}, 8);
  auto y = linear_deferring_weight_grad(x, weight);
  CHECK(y.grad_fn()->name() != "torch::autograd::CppNode<LinearDeferringWeightGrad>");
  y.sum().backward();
  REQUIRE(weight.grad().defined());
  check_close(weight.grad(), torch::ones({3, 2}).mm(x), "weight gradient");
  WeightGradStore store;
  DeferWeightGradients deferring(store, {0, 0});
  torch::NoGradGuard no_grad;
  check_close(linear_deferring_weight_grad(x, weight), torch::linear(x, weight), "no-grad forward");
  CHECK(store.empty());
}
