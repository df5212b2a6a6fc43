// Ring attention on real processes: the whole world is one cp group (run with
// 1, 2, 3 and 4 ranks). Every rank builds the whole sequence's q, k, v and the
// upstream gradient from one seed, computes dense causal attention with autograd
// in double precision, and checks that ring attention over its two chunks gives
// the dense output and q, k, v gradients of those chunks (1e-12 of the largest
// value in double precision, 1e-6 in fp32).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "parallel/all_to_all_attention.h"
#include "parallel/gloo_communicator.h"
#include "parallel/launch_env.h"
#include "parallel/process_groups.h"
#include "parallel/ring_attention.h"

using namespace loom::parallel;

namespace {

struct CpWorld {
  LaunchEnv env{std::chrono::seconds(60)};
  std::shared_ptr<CommStats> stats = std::make_shared<CommStats>();
  RankGrid grid{ParallelSizes{1, 1, 1, 1, env.world()}};
  ProcessGroups groups{grid, env.rank(),
                       make_gloo_factory(env.store(), env.single_host(), stats, std::chrono::seconds(60)), stats};
};
CpWorld* g_world = nullptr;  // set once in main

// With DROPOUT, the whole sequence's probabilities times the keyed masks at positions 0 .. S-1.
torch::Tensor dense_causal(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, double scale,
                           const AttentionDropout& dropout) {
  const int64_t group = q.size(1) / k.size(1), s = q.size(2);
  auto kk = k.repeat_interleave(group, 1), vv = v.repeat_interleave(group, 1);
  auto scores = torch::matmul(q, kk.transpose(-2, -1)) * scale;
  scores = scores.masked_fill(torch::ones({s, s}, torch::kBool).triu(1), -std::numeric_limits<double>::infinity());
  auto probs = torch::softmax(scores, -1);
  if (dropout.active()) {
    auto positions = torch::arange(s, torch::kInt64);
    probs = probs * attention_keep_scale(dropout, q.size(0), q.size(1), positions, positions, probs.scalar_type());
  }
  return torch::matmul(probs, vv);
}

int64_t total_sent() {
  int64_t bytes = 0;
  for (const auto& [peer, sent] : g_world->stats->sent_to()) bytes += sent;
  return bytes;
}

double max_difference(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
}

using Attention = torch::Tensor (*)(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, Communicator&,
                                    double, const AttentionDropout&);

void check_against_dense(int64_t batch, int64_t heads, int64_t kv_heads, int64_t seq, int64_t d,
                         Attention attention = ring_attention, double dropout_p = 0.0) {
  auto& cp = g_world->groups.cp();
  const int64_t n = cp.size(), r = cp.rank();
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  torch::manual_seed(42);
  auto q = torch::randn({batch, heads, seq, d}, torch::kFloat64).requires_grad_(true);
  auto k = torch::randn({batch, kv_heads, seq, d}, torch::kFloat64).requires_grad_(true);
  auto v = torch::randn({batch, kv_heads, seq, d}, torch::kFloat64).requires_grad_(true);
  auto upstream = torch::randn({batch, heads, seq, d}, torch::kFloat64);
  // Heads 3 .. of a model of heads + 5 (as on a tp rank), keyed by 1234.
  const AttentionDropout dropout{dropout_p, 1234, 3, heads + 5, seq};
  auto dense = dense_causal(q, k, v, scale, dropout);
  dense.backward(upstream);

  // This rank's chunks, along the sequence (dim 2 here).
  auto mine = [&](const torch::Tensor& x) {
    return context_parallel_slice(x.detach().transpose(1, 2), n, r).transpose(1, 2).contiguous();
  };
  // In double precision the ring is exact up to rounding; in fp32 within 1e-6 of the largest value.
  for (auto dtype : {torch::kFloat64, torch::kFloat32}) {
    auto lq = mine(q).to(dtype).requires_grad_(true);
    auto lk = mine(k).to(dtype).requires_grad_(true);
    auto lv = mine(v).to(dtype).requires_grad_(true);
    auto out = attention(lq, lk, lv, cp, scale, dropout);
    out.backward(mine(upstream).to(dtype));
    auto close = [&](const torch::Tensor& got, const torch::Tensor& want) {
      const double tolerance = dtype == torch::kFloat64 ? 1e-12 : 1e-6;
      const double largest = std::max(1.0, want.abs().max().item<double>());
      INFO("dtype " << dtype << ", largest " << largest);
      CHECK(max_difference(got, want) <= tolerance * largest);
    };
    close(out, mine(dense));
    close(lq.grad(), mine(q.grad()));
    close(lk.grad(), mine(k.grad()));
    close(lv.grad(), mine(v.grad()));
  }
}

}  // namespace

TEST_CASE("ring attention equals dense causal attention, forward and backward", "[cp]") {
  const int64_t n = g_world->groups.cp().size();
  check_against_dense(2, 4, 4, 4 * n, 8);  // chunks of 2 tokens
  check_against_dense(1, 2, 2, 6 * n, 4);  // chunks of 3
}

TEST_CASE("ring attention with grouped-query attention: only kv heads travel", "[cp]") {
  const int64_t n = g_world->groups.cp().size();
  check_against_dense(2, 4, 2, 4 * n, 8);
  check_against_dense(1, 4, 1, 8 * n, 4);
}

TEST_CASE("all-to-all attention equals dense causal attention, with GQA", "[cp]") {
  const int64_t n = g_world->groups.cp().size();
  check_against_dense(2, 4 * n, 4 * n, 4 * n, 8, all_to_all_attention);
  check_against_dense(1, 2 * n, n, 6 * n, 4, all_to_all_attention);
}

TEST_CASE("ring and all-to-all attention with keyed dropout equal dense attention under the same masks", "[cp]") {
  const int64_t n = g_world->groups.cp().size();
  check_against_dense(2, 4, 4, 4 * n, 8, ring_attention, 0.3);
  check_against_dense(1, 4, 2, 6 * n, 4, ring_attention, 0.5);  // GQA
  check_against_dense(2, 4 * n, 2 * n, 4 * n, 8, all_to_all_attention, 0.3);
}

TEST_CASE("keyed dropout keeps 1 - p of the elements, the same ones for the same key", "[cp]") {
  auto coordinates = torch::arange(200000, torch::kInt64) + (int64_t{5} << 32);
  auto keep = keyed_keep_scale(coordinates, 0.1, 77, torch::kFloat64);
  CHECK(keep.gt(0).to(torch::kFloat64).mean().item<double>() == Approx(0.9).margin(0.005));
  CHECK(keep.max().item<double>() == Approx(1.0 / 0.9));
  CHECK(keep.equal(keyed_keep_scale(coordinates, 0.1, 77, torch::kFloat64)));
  CHECK(!keep.equal(keyed_keep_scale(coordinates, 0.1, 78, torch::kFloat64)));
  // Neighbouring coordinates are not correlated: drops of i and i + 1 coincide about p^2 of the time.
  auto dropped = keep.eq(0).to(torch::kFloat64);
  CHECK((dropped.narrow(0, 0, 199999) * dropped.narrow(0, 1, 199999)).mean().item<double>() ==
        Approx(0.01).margin(0.002));
}

TEST_CASE("ring attention's traffic: cp - 1 key/value shards forward, twice that backward", "[cp]") {
  auto& cp = g_world->groups.cp();
  const int64_t n = cp.size();
  const int64_t b = 1, kv_heads = 2, c = 3, d = 4;
  auto q = torch::randn({b, 4, 2 * c, d}).requires_grad_(true);
  auto k = torch::randn({b, kv_heads, 2 * c, d}).requires_grad_(true);
  auto v = torch::randn({b, kv_heads, 2 * c, d}).requires_grad_(true);
  const int64_t before = total_sent();
  auto out = ring_attention(q, k, v, cp, 0.5);
  const int64_t after_forward = total_sent();
  out.sum().backward();
  const int64_t after_backward = total_sent();
  const int64_t shard = 2 * b * kv_heads * 2 * c * d * 4;  // k and v of one rank, fp32 bytes
  CHECK(after_forward - before == (n - 1) * shard);
  CHECK(after_backward - after_forward == 2 * (n - 1) * shard);
}

TEST_CASE("positions and slices of the load-balanced layout", "[cp]") {
  CHECK(context_parallel_positions(8, 2, 0) == std::vector<int64_t>{0, 1, 6, 7});
  CHECK(context_parallel_positions(8, 2, 1) == std::vector<int64_t>{2, 3, 4, 5});
  auto x = torch::arange(12).view({1, 12});
  CHECK(context_parallel_slice(x, 3, 1).equal(torch::tensor({2, 3, 8, 9}).view({1, 4})));
}

int main(int argc, char** argv) {
  torch::set_num_threads(1);
  CpWorld world;
  g_world = &world;
  const int result = Catch::Session().run(argc, argv);
  auto failed = torch::tensor({static_cast<double>(result != 0)}, torch::kFloat64);
  world.groups.world_comm().all_reduce(failed, ReduceOp::max).wait();
  return failed.item<double>() > 0 ? 1 : 0;
}
