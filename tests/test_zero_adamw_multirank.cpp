// ZeRO's sharded AdamW (optim/zero_adamw.h) on real processes, all ranks one
// dp group (run at dp = 2 and 3: 3 pads the buckets): each rank updates its
// shard of every bucket, and after the all-gather every parameter must equal
// plain AdamW's on the whole tensor fed the mean gradient, with weight decay on
// the matrices only, for several steps; the moments gathered for a checkpoint
// must equal plain AdamW's, and moments set from them must resume alike.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "check_close.h"
#include "multirank_world.h"
#include "optim/adamw.h"
#include "optim/zero_adamw.h"
#include "parallel/grad_buckets.h"

using namespace loom;
using loom::test::check_close;

namespace {

test::MultiRankWorld* g_world = nullptr;  // set once in main
const optim::AdamWOptions kOptions{0.9, 0.95, 1e-8, 0.1};
const std::vector<double> kLearningRates = {0.05, 0.02, 0.01};

// Matrices (decayed) and a vector (not decayed), the same on every rank.
std::vector<torch::Tensor> initial() {
  return {torch::linspace(-1, 1, 15).reshape({5, 3}), torch::linspace(0.3, -0.4, 7),
          torch::linspace(2, -1, 8).reshape({4, 2})};
}

// Rank RANK's gradient of parameter I at step STEP.
torch::Tensor gradient(int64_t rank, int64_t step, size_t i, const torch::Tensor& like) {
  return torch::sin(torch::arange(like.numel(), torch::kFloat).reshape(like.sizes()) * (1.0 + 0.37 * i) + 3.0 * rank +
                    0.5 * step) *
         (1.0 + rank);
}

struct Sharded {
  std::vector<torch::Tensor> params;
  std::unique_ptr<parallel::GradientBuckets> buckets;
  std::unique_ptr<optim::ZeroAdamW> optimizer;
  Sharded() {
    for (auto& p : initial()) params.push_back(p.requires_grad_(true));
    // 40 bytes: several buckets, so shards cut through parameters and padding differs per bucket.
    buckets = std::make_unique<parallel::GradientBuckets>(params, g_world->groups.dp(), 40, 1, /*zero_stage=*/1);
    optimizer = std::make_unique<optim::ZeroAdamW>(params, *buckets, g_world->groups.dp(), kOptions);
  }
  // This rank's gradients through autograd into the buckets, reduced to the mean, then one update.
  void step(int64_t step, double lr) {
    const int64_t rank = g_world->groups.dp().rank();
    optimizer->zero_grad();
    buckets->start_step();
    auto loss = torch::zeros({});
    for (size_t i = 0; i < params.size(); ++i) loss = loss + (params[i] * gradient(rank, step, i, params[i])).sum();
    loss.backward();
    buckets->finish();
    optimizer->step(lr);
  }
};

struct Plain {
  std::vector<torch::Tensor> params = initial();
  optim::AdamW optimizer{params, kOptions};
  void step(int64_t step, double lr, int64_t world) {
    for (size_t i = 0; i < params.size(); ++i) {
      auto mean = torch::zeros_like(params[i]);
      for (int64_t r = 0; r < world; ++r) mean += gradient(r, step, i, params[i]);
      params[i].mutable_grad() = mean / static_cast<double>(world);
    }
    optimizer.step(lr);
  }
};

}  // namespace

TEST_CASE("ZeRO AdamW: sharded updates equal plain AdamW on whole tensors with the mean gradient", "[zero_adamw]") {
  const int64_t world = g_world->groups.dp().size();
  REQUIRE(world > 1);
  Sharded sharded;
  Plain plain;
  // The buckets pad to a multiple of dp and each rank keeps moments for its shard only.
  int64_t shard_elements = 0;
  for (int64_t b = 0; b < sharded.buckets->num_buckets(); ++b) {
    const auto& l = sharded.buckets->layout(static_cast<size_t>(b));
    int64_t used = 0;
    for (size_t j : l.params) used += sharded.params[j].numel();
    const int64_t shard_size = l.flat.shard_size();
    CHECK(shard_size * world == l.buffer.numel());
    CHECK(l.buffer.numel() - used < world);
    CHECK(l.shard_begin == g_world->groups.dp().rank() * shard_size);
    shard_elements += shard_size;
  }
  CHECK(sharded.buckets->num_buckets() > 1);
  CHECK(sharded.optimizer->state_bytes() == shard_elements * 8);

  for (size_t s = 0; s < kLearningRates.size(); ++s) {
    INFO("step " << s);
    sharded.step(static_cast<int64_t>(s), kLearningRates[s]);
    plain.step(static_cast<int64_t>(s), kLearningRates[s], world);
    for (size_t i = 0; i < plain.params.size(); ++i) {
      check_close(sharded.params[i].detach(), plain.params[i], "parameter " + std::to_string(i));
    }
  }
  CHECK(sharded.optimizer->steps_taken() == 3);

  sharded.optimizer->gather_moments();
  for (size_t i = 0; i < plain.params.size(); ++i) {
    const auto [m, v] = sharded.optimizer->moments(i);
    const auto [plain_m, plain_v] = plain.optimizer.moments(i);
    check_close(m, plain_m, "exp_avg " + std::to_string(i));
    check_close(v, plain_v, "exp_avg_sq " + std::to_string(i));
  }

  // A resumed optimizer (fresh shards, moments and step count from the checkpoint) goes on alike.
  Sharded resumed;
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < plain.params.size(); ++i) resumed.params[i].copy_(sharded.params[i]);
  }
  for (size_t i = 0; i < plain.params.size(); ++i) {
    const auto [m, v] = sharded.optimizer->moments(i);
    resumed.optimizer->set_moments(i, m, v);
  }
  sharded.optimizer->release_moments();
  CHECK_THROWS(sharded.optimizer->moments(0));  // whole moments exist only between gather and release
  resumed.optimizer->set_steps_taken(3);
  resumed.step(3, 0.01);
  plain.step(3, 0.01, world);
  for (size_t i = 0; i < plain.params.size(); ++i) {
    check_close(resumed.params[i].detach(), plain.params[i], "resumed parameter " + std::to_string(i));
  }
}

TEST_CASE("ZeRO AdamW: weight decay shrinks the matrices only", "[zero_adamw]") {
  // A zero gradient everywhere: AdamW's update is then the decay alone, p * (1 - lr * wd), on matrices.
  Sharded sharded;
  sharded.optimizer->zero_grad();
  sharded.buckets->start_step();
  auto loss = torch::zeros({});
  for (auto& p : sharded.params) loss = loss + (p * 0).sum();
  loss.backward();
  sharded.buckets->finish();
  sharded.optimizer->step(0.5);
  const auto start = initial();
  check_close(sharded.params[0].detach(), start[0] * (1 - 0.5 * 0.1), "matrix 0 decayed");
  check_close(sharded.params[1].detach(), start[1], "vector not decayed");
  check_close(sharded.params[2].detach(), start[2] * (1 - 0.5 * 0.1), "matrix 2 decayed");
}

int main(int argc, char** argv) {
  torch::set_num_threads(1);
  test::MultiRankWorld world([](int64_t) { return 1; });
  g_world = &world;
  const int failed = Catch::Session().run(argc, argv);
  world.groups.world_comm().barrier().wait();
  return failed == 0 ? 0 : 1;
}
