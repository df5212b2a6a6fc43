// The MoE router, its losses and capacity rule against values worked by hand;
// the layer against a token-by-token loop; the imbalance monitor on a router
// forced to one expert; the moe config keys.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/config.h"
#include "core/errors.h"
#include "launch/moe_metrics.h"
#include "models/moe.h"

using namespace loom;
using namespace loom::models;

namespace {

std::shared_ptr<parallel::CommStats> no_stats() {
  return std::make_shared<parallel::CommStats>();
}

MoELayerOptions small_options(int64_t experts, int64_t top_k) {
  MoELayerOptions o;
  o.hidden_size = 8;
  o.ffn_hidden_size = 16;
  o.moe.num_experts = experts;
  o.moe.top_k = top_k;
  o.moe.aux_loss_coeff = 0.0;
  o.moe.z_loss_coeff = 0.0;
  o.seed = 7;
  return o;
}

}  // namespace

TEST_CASE("router: top-k choices, weights renormalised over them", "[moe]") {
  // Token 0 prefers experts 2 then 0; token 1 prefers 1 then 3.
  auto logits = torch::tensor({{1.0, -1.0, 2.0, 0.0}, {0.0, 3.0, -2.0, 1.0}});
  auto r = route_tokens(logits, 2, 0.0);
  CHECK(torch::equal(r.assignment.experts, torch::tensor({{2, 0}, {1, 3}}, torch::kInt64)));
  auto p = torch::softmax(logits, -1);
  auto w0 = p[0][2].item<double>() / (p[0][2].item<double>() + p[0][0].item<double>());
  CHECK(r.assignment.weights[0][0].item<double>() == Approx(w0).epsilon(1e-6));
  CHECK(r.assignment.weights.sum(-1).allclose(torch::ones({2})));
  CHECK(torch::equal(r.counts, torch::tensor({1, 1, 1, 1}, torch::kInt64)));
  CHECK(r.assignment.keep.all().item<bool>());
  CHECK(r.dropped == 0);
  // Top-1 keeps the router probability (Switch), so the router learns from the loss.
  auto top1 = route_tokens(logits, 1, 0.0);
  CHECK(top1.assignment.weights[0][0].item<double>() == Approx(p[0][2].item<double>()).epsilon(1e-6));
  CHECK(expert_capacity(3, 1, 8, 0.01) == 1);  // never zero slots
}

TEST_CASE("capacity: ceil(T k / E c), lowest router probability dropped first", "[moe]") {
  CHECK(expert_capacity(4, 1, 2, 1.0) == 2);
  CHECK(expert_capacity(6, 2, 4, 1.0) == 3);
  CHECK(expert_capacity(5, 1, 2, 1.0) == 3);    // 2.5 rounds up
  CHECK(expert_capacity(10, 1, 4, 1.25) == 4);  // 3.125
  // Four tokens all pick expert 0 (top-1), with probabilities from these
  // logits; capacity 2 keeps the two most confident: tokens 0 and 2.
  auto logits = torch::tensor({{3.0, 0.0}, {1.0, 0.0}, {2.0, 0.0}, {1.5, 0.0}});
  auto r = route_tokens(logits, 1, 1.0);
  CHECK(torch::equal(r.assignment.keep.reshape({-1}), torch::tensor({true, false, true, false})));
  CHECK(r.dropped == 2);
  CHECK(torch::equal(r.counts, torch::tensor({4, 0}, torch::kInt64)));  // counted before dropping
  // Equal probabilities: the later token is dropped.
  auto tied = route_tokens(torch::tensor({{1.0, 0.0}, {1.0, 0.0}, {1.0, 0.0}}), 1, 1.0);  // capacity 2
  CHECK(torch::equal(tied.assignment.keep.reshape({-1}), torch::tensor({true, true, false})));
}

TEST_CASE("load-balancing and z losses equal hand-computed values", "[moe]") {
  // probabilities [.75 .25], [.25 .75], [.75 .25]: top-1 counts (2, 1), sums (1.75, 1.25).
  const double l3 = std::log(3.0);
  auto logits = torch::tensor({{l3, 0.0}, {0.0, l3}, {l3, 0.0}});
  auto r = route_tokens(logits, 1, 0.0);
  CHECK(torch::equal(r.counts, torch::tensor({2, 1}, torch::kInt64)));
  auto aux = load_balancing_loss(r.probs.sum(0), r.counts, 3, 1);
  // E * sum_e f_e P_e = 2 * (2/3 * 1.75/3 + 1/3 * 1.25/3) = 9.5 / 9
  CHECK(aux.item<double>() == Approx(9.5 / 9.0).epsilon(1e-6));
  // Uniform routing gives exactly 1.
  auto uniform = route_tokens(torch::tensor({{l3, 0.0}, {0.0, l3}}), 1, 0.0);
  CHECK(load_balancing_loss(uniform.probs.sum(0), uniform.counts, 2, 1).item<double>() == Approx(1.0).epsilon(1e-6));
  // logsumexp of (ln 3, 0) is ln 4 for every token.
  CHECK(router_z_loss(logits, 3).item<double>() == Approx(std::pow(std::log(4.0), 2)).epsilon(1e-6));
}

TEST_CASE("MoE layer equals a token-by-token loop over the chosen experts", "[moe]") {
  parallel::SelfCommunicator ep("ep", 0, no_stats()), tp("tp", 0, no_stats());
  auto options = small_options(4, 2);
  MoELayer layer(options, ep, tp);
  auto x = torch::randn({2, 3, 8}, torch::TensorOptions().dtype(torch::kFloat32)).requires_grad_(true);
  auto y = layer->forward(x);
  auto params = layer->named_parameters();
  auto tokens = x.detach().reshape({-1, 8});
  auto r = route_tokens(torch::linear(tokens, params["router_weight"]), 2, 0.0);
  for (int64_t t = 0; t < tokens.size(0); ++t) {
    auto expected = torch::zeros({8});
    for (int64_t c = 0; c < 2; ++c) {
      const auto e = std::to_string(r.assignment.experts[t][c].item<int64_t>());
      auto hidden = torch::gelu(
          torch::linear(tokens[t], params["expert_" + e + "_fc_weight"], params["expert_" + e + "_fc_bias"]), "tanh");
      expected += r.assignment.weights[t][c] *
                  torch::linear(hidden, params["expert_" + e + "_proj_weight"], params["expert_" + e + "_proj_bias"]);
    }
    CHECK(torch::allclose(y.reshape({-1, 8})[t].detach(), expected, 1e-6, 1e-6));
  }
  y.sum().backward();
  // Every expert gets a gradient, even one no token chose; the router learns through the weights.
  for (const auto& p : layer->parallel_parameters()) {
    INFO(p.name);
    CHECK(p.tensor.grad().defined());
  }
  CHECK(params["router_weight"].grad().abs().sum().item<double>() > 0);
}

TEST_CASE("auxiliary losses reach the router through the layer's output", "[moe]") {
  parallel::SelfCommunicator ep("ep", 0, no_stats()), tp("tp", 0, no_stats());
  auto options = small_options(4, 2);
  options.moe.aux_loss_coeff = 0.5;
  options.moe.z_loss_coeff = 0.25;
  options.loss_scale = 0.5;
  MoELayer layer(options, ep, tp);
  layer->train();
  auto x = torch::randn({1, 6, 8});
  // An upstream gradient of zero: only the auxiliary losses drive the router.
  (layer->forward(x) * 0.0).sum().backward();
  auto router = layer->named_parameters()["router_weight"];
  auto got = router.grad().clone();
  // The same losses built by hand, scaled by loss_scale.
  auto w = router.detach().clone().requires_grad_(true);
  auto logits = torch::linear(x.reshape({-1, 8}), w);
  auto r = route_tokens(logits, 2, 0.0);
  auto loss = (load_balancing_loss(r.probs.sum(0), r.counts, 6, 2) * 0.5 + router_z_loss(logits, 6) * 0.25) * 0.5;
  loss.backward();
  CHECK(got.abs().sum().item<double>() > 0);
  CHECK(torch::allclose(got, w.grad(), 1e-6, 1e-7));
  // The statistics of the step: one micro-batch, 6 tokens x 2 choices.
  auto& stats = layer->stats();
  CHECK(stats.micro_batches == 1);
  CHECK(stats.tokens_per_expert.sum().item<int64_t>() == 12);
  CHECK(stats.aux_loss.item<double>() == Approx(load_balancing_loss(r.probs.sum(0), r.counts, 6, 2).item<double>()));
}

TEST_CASE("a router forced to one expert is flagged hot and imbalanced", "[moe]") {
  parallel::SelfCommunicator ep("ep", 0, no_stats()), tp("tp", 0, no_stats());
  auto options = small_options(4, 1);
  MoELayer layer(options, ep, tp);
  {
    torch::NoGradGuard no_grad;
    auto router = layer->named_parameters()["router_weight"];
    router.zero_();
    router[2].fill_(1.0);  // positive inputs: expert 2 always has the largest logit
  }
  Config config;
  config.model.num_layers = 1;
  config.model.moe = options.moe;
  launch::MoEMonitor monitor(config, {&layer->stats()});
  std::vector<std::string> warnings;
  for (int step = 0; step < launch::kHotSteps; ++step) {
    layer->forward(torch::rand({2, 5, 8}) + 0.1);
    std::vector<double> counts;
    for (int64_t e = 0; e < 4; ++e)
      counts.push_back(static_cast<double>(layer->stats().tokens_per_expert[e].item<int64_t>()));
    CHECK(counts[2] == 10);
    CHECK(*std::max_element(counts.begin(), counts.end()) / 2.5 == Approx(4.0));  // imbalance max/mean
    warnings = monitor.check_hot({0}, {counts});
    CHECK(warnings.size() == (step + 1 == launch::kHotSteps ? 1u : 0u));
    layer->stats().reset();
  }
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Catch::Contains("MoE layer 0: expert 2") && Catch::Contains("4.0x the mean"));
  // A balanced step ends the streak.
  CHECK(monitor.check_hot({0}, {{3, 3, 3, 3}}).empty());
}

TEST_CASE("model.moe keys: nested YAML, --set, validation, resolved dump", "[moe][config]") {
  auto path = std::filesystem::temp_directory_path() / ("loom_test_moe_" + std::to_string(::getpid()) + ".yaml");
  std::ofstream(path) << "model:\n  num_layers: 4\n  moe:\n    num_experts: 8\n    top_k: 2\n    every: 2\n"
                         "parallel:\n  ep: 4\ntrain:\n  global_batch_size: 8\n  micro_batch_size: 1\n";
  Config c = load_config(path.string(), {"model.moe.capacity_factor=1.25"});
  resolve_and_validate(c, 8);
  CHECK(c.model.moe.num_experts == 8);
  CHECK(c.model.moe.every == 2);
  CHECK(c.model.moe.capacity_factor == 1.25);
  CHECK(is_moe_layer(c.model.moe, 0));
  CHECK_FALSE(is_moe_layer(c.model.moe, 1));
  CHECK_THAT(to_yaml(c), Catch::Contains("  moe:\n    num_experts: 8\n    top_k: 2"));

  auto error = [&](std::vector<std::string> overrides, int64_t world) -> std::string {
    try {
      Config bad = load_config(path.string(), overrides);
      resolve_and_validate(bad, world);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  };
  CHECK_THAT(error({"model.moe.top_k=9"}, 8), Catch::Contains("model.moe.top_k"));
  CHECK_THAT(error({"model.moe.num_experts=6"}, 8),
             Catch::Contains("model.moe.num_experts") && Catch::Contains("parallel.ep = 4"));
  CHECK_THAT(error({"model.moe.num_experts=0"}, 8),
             Catch::Contains("parallel.ep") && Catch::Contains("model.moe.num_experts"));
  CHECK_THAT(error({"parallel.ep=3"}, 8), Catch::Contains("parallel.ep"));
  CHECK_THAT(error({"model.moe.capacity_factor=-1"}, 8), Catch::Contains("model.moe.capacity_factor"));
  CHECK_THAT(error({"model.moe.every=0"}, 8), Catch::Contains("model.moe.every"));
  CHECK_THAT(error({"model.moe.num_expert=4"}, 8), Catch::Contains("did you mean 'model.moe.num_experts'"));
  std::filesystem::remove(path);
}
