// The token dispatcher on real processes: the whole world is one ep group
// (run with 1, 2 and 4 ranks). Every rank can compute every rank's tokens and
// routing from shared seeds, so each checks exactly which rows reach its
// experts. With identity experts, dispatch then combine returns each token
// times the sum of its kept weights (the token itself, exactly, with top-1),
// and the gradients are the weight-scaled upstream gradient and <g, x>.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "parallel/gloo_communicator.h"
#include "parallel/launch_env.h"
#include "parallel/moe_dispatch.h"
#include "parallel/process_groups.h"

using namespace loom::parallel;

namespace {

struct EpWorld {
  LaunchEnv env{std::chrono::seconds(60)};
  std::shared_ptr<CommStats> stats = std::make_shared<CommStats>();
  RankGrid grid{ParallelSizes{1, 1, env.world(), env.world()}};
  ProcessGroups groups{grid, env.rank(),
                       make_gloo_factory(env.store(), env.single_host(), stats, std::chrono::seconds(60)), stats};
};
EpWorld* g_world = nullptr;  // set once in main

constexpr int64_t kHidden = 5;

// Rank R's tokens and routing: an uneven number of tokens, most choices on
// expert 0 (skewed), a few dropped, distinct experts per token.
struct RankData {
  torch::Tensor x;
  ExpertAssignment a;
};
RankData rank_data(int64_t rank, int64_t experts, int64_t top_k, bool drop) {
  torch::manual_seed(1000 + rank);
  const int64_t tokens = 3 + 2 * rank;
  RankData d;
  d.x = torch::randn({tokens, kHidden});
  // Skewed scores: expert 0 wins most often.
  auto scores = torch::rand({tokens, experts}) + torch::arange(experts, 0, -1).to(torch::kFloat32) * 0.3;
  d.a.experts = std::get<1>(scores.topk(top_k, -1));
  d.a.weights = torch::rand({tokens, top_k}) + 0.1;
  d.a.keep = drop ? torch::rand({tokens, top_k}) > 0.2 : torch::ones({tokens, top_k}, torch::kBool);
  if (top_k == 1) d.a.weights = torch::ones({tokens, 1});
  return d;
}

void round_trip(int64_t experts_per_rank, int64_t top_k, bool drop) {
  auto& ep = g_world->groups.ep();
  const int64_t ranks = ep.size(), me = ep.rank(), experts = experts_per_rank * ranks;
  AllToAllVolume volume;
  TokenDispatcher dispatcher(experts, ep, &volume);
  auto mine = rank_data(me, experts, top_k, drop);
  auto x = mine.x.clone().requires_grad_(true);
  auto weights = mine.a.weights.clone().requires_grad_(true);
  auto dispatched = dispatcher.dispatch(x, {mine.a.experts, weights, mine.a.keep});

  // The rows each local expert should get: every rank's tokens that chose it, rank by rank, in token order.
  std::vector<torch::Tensor> expected_rows;
  for (int64_t e = 0; e < experts_per_rank; ++e) {
    const int64_t expert = dispatcher.first_local_expert() + e;
    std::vector<torch::Tensor> rows;
    for (int64_t r = 0; r < ranks; ++r) {
      auto d = rank_data(r, experts, top_k, drop);
      auto chose = ((d.a.experts == expert) & d.a.keep).any(1);
      rows.push_back(d.x.index_select(0, chose.nonzero().reshape({-1})));
    }
    auto all = torch::cat(rows, 0);
    CHECK(dispatched.tokens_per_expert.host()[static_cast<size_t>(e)] == all.size(0));
    expected_rows.push_back(all);
  }
  CHECK(torch::equal(dispatched.tokens.detach(), torch::cat(expected_rows, 0)));

  auto y = dispatcher.combine(dispatched.tokens, dispatched.plan);  // identity experts
  auto kept_weight = (mine.a.weights * mine.a.keep.to(torch::kFloat32)).sum(1, true);
  if (top_k == 1 && !drop) {
    CHECK(torch::equal(y.detach(), mine.x));  // exactly the input
  } else {
    CHECK(torch::allclose(y.detach(), mine.x * kept_weight, 1e-6, 1e-6));
  }
  auto g = torch::randn_like(mine.x);
  y.backward(g);
  CHECK(torch::allclose(x.grad(), g * kept_weight, 1e-6, 1e-6));
  auto expected_wgrad = (g * mine.x).sum(1, true).expand({-1, top_k}) * mine.a.keep.to(torch::kFloat32);
  if (top_k > 1 || drop) CHECK(torch::allclose(weights.grad(), expected_wgrad, 1e-5, 1e-6));

  // The volume counts rows to and from other ranks, both directions, plus the count exchange.
  if (ranks == 1) CHECK(volume.sent == 0);
  auto sent = torch::tensor({static_cast<double>(volume.sent)}, torch::kFloat64);
  auto received = torch::tensor({static_cast<double>(volume.received)}, torch::kFloat64);
  ep.all_reduce(sent).wait();
  ep.all_reduce(received).wait();
  CHECK(sent.item<double>() == received.item<double>());  // what leaves one rank arrives at another
}

}  // namespace

TEST_CASE("dispatch then combine is the weighted identity, top-1 exactly", "[moe]") {
  round_trip(1, 1, false);
  round_trip(2, 1, false);
}

TEST_CASE("top-2 with uneven routing and dropped choices", "[moe]") {
  round_trip(2, 2, false);
  round_trip(2, 2, true);
  round_trip(3, 2, true);
}

TEST_CASE("a rank that sends nothing and an expert that gets nothing", "[moe]") {
  auto& ep = g_world->groups.ep();
  const int64_t experts = 2 * ep.size();
  TokenDispatcher dispatcher(experts, ep);
  // Every rank routes its tokens to expert 0 only; rank 0 has no kept choice at all.
  auto x = torch::randn({4, kHidden}).requires_grad_(true);
  auto keep = torch::full({4, 1}, ep.rank() != 0, torch::kBool);
  auto d = dispatcher.dispatch(x, {torch::zeros({4, 1}, torch::kInt64), torch::ones({4, 1}), keep});
  const int64_t expected = ep.rank() == 0 ? 4 * (ep.size() - 1) : 0;
  CHECK(d.tokens_per_expert.host()[0] == expected);
  CHECK(d.tokens_per_expert.host()[1] == 0);
  auto y = dispatcher.combine(d.tokens * 2.0, d.plan);
  CHECK(torch::equal(y.detach(), ep.rank() == 0 ? torch::zeros({4, kHidden}) : x.detach() * 2.0));
  y.sum().backward();
  CHECK(x.grad().defined());
}

int main(int argc, char** argv) {
  torch::set_num_threads(1);
  EpWorld world;
  g_world = &world;
  const int result = Catch::Session().run(argc, argv);
  // Every rank must reach the same verdict: a failure anywhere fails the job.
  auto failed = torch::tensor({static_cast<double>(result != 0)}, torch::kFloat64);
  world.groups.world_comm().all_reduce(failed, ReduceOp::max).wait();
  return failed.item<double>() > 0 ? 1 : 0;
}
