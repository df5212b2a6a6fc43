// The MoE dispatcher's path for one ep rank with every choice kept (gathers both ways, the routing
// never read on the host) against its general path (scatter-add, counts read on the host).
#include <catch2/catch.hpp>

#include "models/moe.h"

using namespace loom;
using namespace loom::models;

namespace {

std::shared_ptr<parallel::CommStats> no_stats() {
  return std::make_shared<parallel::CommStats>();
}

}  // namespace

TEST_CASE("dispatch with every choice kept gathers as the general path scatters", "[moe]") {
  // One ep rank, no capacity: dispatch and combine gather rows (no scatter-add, no read of the
  // routing on the host). The same rows, output and gradients as the general path, which takes
  // the same assignment with all_kept false; fp64, so only summation order could differ.
  torch::manual_seed(5);
  parallel::SelfCommunicator ep("ep", 0, no_stats());
  parallel::TokenDispatcher dispatcher(4, ep);
  const int64_t tokens = 7, k = 2, h = 3;
  auto x0 = torch::randn({tokens, h}, torch::kFloat64);
  auto logits = torch::randn({tokens, 4}, torch::kFloat64);
  auto expert_w = torch::randn({h, h}, torch::kFloat64);
  auto upstream = torch::randn({tokens, h}, torch::kFloat64);
  auto once = [&](bool all_kept) {
    auto x = x0.clone().requires_grad_(true), l = logits.clone().requires_grad_(true);
    auto r = route_tokens(l, k, 0.0);
    REQUIRE(r.assignment.all_kept);
    r.assignment.all_kept = all_kept;
    auto d = dispatcher.dispatch(x, r.assignment);
    CHECK(d.tokens_per_expert.on_host() == !all_kept);  // the fast path never reads the counts
    CHECK(d.tokens_per_expert.host() ==
          std::vector<int64_t>(r.counts.data_ptr<int64_t>(), r.counts.data_ptr<int64_t>() + 4));
    auto y = dispatcher.combine(torch::tanh(d.tokens.matmul(expert_w)), d.plan);
    (y * upstream).sum().backward();
    return std::tuple{d.tokens.detach(), y.detach(), x.grad(), l.grad()};
  };
  auto [rows, y, gx, gl] = once(true);
  auto [rows_ref, y_ref, gx_ref, gl_ref] = once(false);
  CHECK(torch::equal(rows, rows_ref));
  CHECK(torch::allclose(y, y_ref, 1e-12, 1e-12));
  CHECK(torch::allclose(gx, gx_ref, 1e-12, 1e-12));
  CHECK(torch::allclose(gl, gl_ref, 1e-12, 1e-12));
  CHECK(gl.abs().sum().item<double>() > 0);
  // Counting without bincount (which waits for the host on a GPU) counts the same.
  auto experts = torch::randint(0, 6, {50}, torch::kInt64);
  CHECK(torch::equal(parallel::count_per_expert(experts, 6), torch::bincount(experts, {}, 6)));
}
