// The pipeline executor (parallel/pipeline_executor.h) on real processes, all
// ranks one pipeline (run at pp = 2 and 4): a chain of tanh layers, one per
// virtual stage, under gpipe, 1f1b, interleaved and zb-h1. Every received
// activation must be its micro-batch's (no message mixed up), the last stage's
// losses and every stage's weight gradients must equal one process running the
// whole chain, and each weight's gradient must arrive once per micro-batch (under
// zb-h1, in the W passes: the layers defer their weight gradients).
#define CATCH_CONFIG_RUNNER
#include <ATen/CPUGeneratorImpl.h>

#include <catch2/catch.hpp>
#include <map>

#include "check_close.h"
#include "parallel/gloo_communicator.h"
#include "parallel/grad_hooks.h"
#include "parallel/launch_env.h"
#include "parallel/pipeline_executor.h"
#include "parallel/process_groups.h"
#include "parallel/weight_grad_store.h"

using namespace loom::parallel;
using loom::test::check_close;

namespace {

struct PipelineWorld {
  LaunchEnv env{std::chrono::seconds(60)};
  std::shared_ptr<CommStats> stats = std::make_shared<CommStats>();
  RankGrid grid{ParallelSizes{1, env.world(), 1, 1}};
  ProcessGroups groups{grid, env.rank(),
                       make_gloo_factory(env.store(), env.single_host(), stats, std::chrono::seconds(60)), stats};
};
PipelineWorld* g_world = nullptr;  // set once in main

constexpr int64_t kMicroBatches = 4;  // a multiple of 2 and 4, as interleaving needs

torch::Tensor weight_of(int64_t virtual_stage) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(500 + virtual_stage);
  return torch::randn({3, 3}, generator) * 0.8;
}
std::pair<torch::Tensor, torch::Tensor> batch(int64_t micro) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(900 + micro);
  auto x = torch::randn({2, 3}, generator);
  return {x, torch::randn({2, 3}, generator)};
}

// The whole chain in one process: each virtual stage's input per micro-batch, the losses
// and the weight gradients summed over the micro-batches.
struct Reference {
  std::vector<std::vector<torch::Tensor>> inputs;  // [micro][virtual stage]
  std::vector<double> losses;
  std::vector<torch::Tensor> grads;
  explicit Reference(int64_t virtual_stages) {
    std::vector<torch::Tensor> weights;
    for (int64_t k = 0; k < virtual_stages; ++k) weights.push_back(weight_of(k).requires_grad_(true));
    for (int64_t micro = 0; micro < kMicroBatches; ++micro) {
      const auto [x, target] = batch(micro);
      auto h = x;
      inputs.emplace_back();
      for (int64_t k = 0; k < virtual_stages; ++k) {
        inputs.back().push_back(h.detach());
        h = torch::tanh(h.matmul(weights[static_cast<size_t>(k)]));
      }
      auto loss = (h * target).sum();
      losses.push_back(loss.item<double>());
      loss.backward();
    }
    for (auto& w : weights) grads.push_back(w.grad());
  }
};

void run_schedule(PipelineSchedule schedule, int64_t chunks) {
  auto& pp = g_world->groups.pp();
  const int64_t stages = pp.size(), stage = pp.rank(), virtual_stages = stages * chunks;
  const Reference reference(virtual_stages);
  // This stage's chunk c is virtual stage c * stages + stage.
  std::vector<torch::Tensor> weights;
  for (int64_t c = 0; c < chunks; ++c) weights.push_back(weight_of(c * stages + stage).requires_grad_(true));
  std::vector<int64_t> arrivals(static_cast<size_t>(chunks), 0);
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;
  for (int64_t c = 0; c < chunks; ++c) {
    accumulators.push_back(
        after_gradient_accumulated(weights[static_cast<size_t>(c)], [&arrivals, c] { ++arrivals[c]; }));
  }

  std::map<int64_t, double> losses;
  std::vector<PipelineAction> forwards_seen;
  PipelineExecutor executor(schedule, kMicroBatches, chunks, pp, {2, 3});
  const auto timing = executor.run([&](int64_t chunk, int64_t micro, const torch::Tensor& input) {
    forwards_seen.push_back({PipelineAction::forward, micro, chunk});
    const int64_t k = chunk * stages + stage;
    const auto [x, target] = batch(micro);
    if (k == 0) {
      CHECK_FALSE(input.defined());
    } else {
      REQUIRE(input.defined());
      check_close(input, reference.inputs[static_cast<size_t>(micro)][static_cast<size_t>(k)],
                  "input of micro-batch " + std::to_string(micro) + " at virtual stage " + std::to_string(k));
    }
    // x W as a linear layer (W^T, a view of the parameter, as its weight).
    const auto h =
        torch::tanh(linear_deferring_weight_grad(k == 0 ? x : input, weights[static_cast<size_t>(chunk)].t()));
    if (k < virtual_stages - 1) return h;
    auto loss = (h * target).sum();
    losses[micro] = loss.item<double>();
    return loss;
  });

  // Every forward of the schedule ran, in its order, once.
  std::vector<PipelineAction> forwards_listed;
  for (const auto& a : executor.actions()) {
    if (a.kind == PipelineAction::forward) forwards_listed.push_back(a);
  }
  CHECK(forwards_seen == forwards_listed);
  CHECK(static_cast<int64_t>(forwards_seen.size()) == kMicroBatches * chunks);
  CHECK(timing.busy_s > 0);
  CHECK(timing.wall_s >= timing.busy_s);
  // Under zb-h1 every chunk's weight gradient of every micro-batch came from a W pass.
  CHECK(timing.deferred_weight_grads == (splits_backward(schedule) ? kMicroBatches * chunks : 0));
  if (stage == stages - 1) {
    REQUIRE(static_cast<int64_t>(losses.size()) == kMicroBatches);
    for (int64_t micro = 0; micro < kMicroBatches; ++micro) {
      CHECK(losses[micro] == Approx(reference.losses[static_cast<size_t>(micro)]).epsilon(1e-6));
    }
  }
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t k = c * stages + stage;
    REQUIRE(weights[static_cast<size_t>(c)].grad().defined());
    CHECK(arrivals[static_cast<size_t>(c)] == kMicroBatches);
    check_close(weights[static_cast<size_t>(c)].grad(), reference.grads[static_cast<size_t>(k)],
                "gradient of virtual stage " + std::to_string(k));
  }
}

}  // namespace

TEST_CASE("pipeline executor: gpipe equals one process", "[pipeline_executor]") {
  run_schedule(PipelineSchedule::gpipe, 1);
}

TEST_CASE("pipeline executor: 1f1b equals one process", "[pipeline_executor]") {
  run_schedule(PipelineSchedule::one_f_one_b, 1);
}

TEST_CASE("pipeline executor: interleaved with two chunks per stage equals one process", "[pipeline_executor]") {
  run_schedule(PipelineSchedule::interleaved, 2);
}

TEST_CASE("pipeline executor: zb-h1 with weight gradients in W passes equals one process", "[pipeline_executor]") {
  run_schedule(PipelineSchedule::zb_h1, 1);
}

int main(int argc, char** argv) {
  torch::set_num_threads(1);
  PipelineWorld world;
  g_world = &world;
  const int failed = Catch::Session().run(argc, argv);
  world.groups.world_comm().barrier().wait();
  return failed == 0 ? 0 : 1;
}
