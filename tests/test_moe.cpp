// The MoE router, its losses and capacity rule against values worked by hand;
// the layer against a token-by-token loop; the imbalance monitor on a router
// forced to one expert; the moe config keys.
#include <algorithm>
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

// DeepSeek-V3's and Qwen3-MoE's routers written token by token from their definitions, with
// plain loops: the scores, the eligible groups, the top k, the weights.
namespace {
struct Chosen {
  std::vector<int64_t> experts;
  std::vector<double> weights;
};
Chosen route_by_hand(const std::vector<double>& logits, const RouterOptions& o) {
  const auto e = static_cast<int64_t>(logits.size());
  std::vector<double> score(logits.size());
  double total = 0;
  for (double l : logits) total += std::exp(l);
  for (size_t i = 0; i < logits.size(); ++i)
    score[i] = o.sigmoid ? 1.0 / (1.0 + std::exp(-logits[i])) : std::exp(logits[i]) / total;
  std::vector<bool> eligible(logits.size(), true);
  if (o.n_group > 1) {
    const int64_t per = e / o.n_group;
    std::vector<std::pair<double, int64_t>> groups;
    for (int64_t g = 0; g < o.n_group; ++g) {
      std::vector<double> members(score.begin() + g * per, score.begin() + (g + 1) * per);
      std::sort(members.rbegin(), members.rend());
      groups.emplace_back(members[0] + members[1], g);
    }
    std::sort(groups.begin(), groups.end(), [](auto a, auto b) { return a.first > b.first; });
    for (int64_t i = 0; i < e; ++i) eligible[static_cast<size_t>(i)] = false;
    for (int64_t k = 0; k < o.topk_group; ++k)
      for (int64_t i = 0; i < per; ++i)
        eligible[static_cast<size_t>(groups[static_cast<size_t>(k)].second * per + i)] = true;
  }
  std::vector<int64_t> order;
  for (int64_t i = 0; i < e; ++i)
    if (eligible[static_cast<size_t>(i)]) order.push_back(i);
  std::sort(order.begin(), order.end(),
            [&](int64_t a, int64_t b) { return score[static_cast<size_t>(a)] > score[static_cast<size_t>(b)]; });
  Chosen c;
  double sum = 0;
  for (int64_t k = 0; k < o.top_k; ++k) {
    c.experts.push_back(order[static_cast<size_t>(k)]);
    sum += score[static_cast<size_t>(order[static_cast<size_t>(k)])];
  }
  for (int64_t x : c.experts) {
    double w = score[static_cast<size_t>(x)];
    if (o.norm_topk_prob && o.top_k > 1) w /= sum;
    c.weights.push_back(w * o.routed_scaling_factor);
  }
  return c;
}
}  // namespace

TEST_CASE("router options: sigmoid or softmax scores, group-limited choice, renormalisation, scaling", "[moe]") {
  torch::manual_seed(11);
  const int64_t tokens = 16, experts = 8;
  const auto logits = torch::randn({tokens, experts}, torch::kFloat64).to(torch::kFloat32) * 2.0;
  std::vector<RouterOptions> cases(4);
  cases[0].sigmoid = true;  // DeepSeek-V3's shape: 4 groups of 2, the best 2 groups, top 3, scaled
  cases[0].n_group = 4;
  cases[0].topk_group = 2;
  cases[0].top_k = 3;
  cases[0].routed_scaling_factor = 2.5;
  cases[1].norm_topk_prob = false;  // Qwen3-MoE's default: the softmax scores as they are
  cases[1].top_k = 2;
  cases[2].sigmoid = true;  // sigmoid, no groups, kept unnormalised
  cases[2].norm_topk_prob = false;
  cases[3].n_group = 2;  // softmax with groups
  cases[3].topk_group = 1;
  cases[3].top_k = 2;
  for (size_t c = 0; c < cases.size(); ++c) {
    const auto r = route_tokens(logits, cases[c]);
    for (int64_t t = 0; t < tokens; ++t) {
      std::vector<double> row;
      for (int64_t i = 0; i < experts; ++i) row.push_back(logits[t][i].item<double>());
      const auto want = route_by_hand(row, cases[c]);
      for (int64_t k = 0; k < cases[c].top_k; ++k) {
        INFO("case " << c << ", token " << t << ", choice " << k);
        CHECK(r.assignment.experts[t][k].item<int64_t>() == want.experts[static_cast<size_t>(k)]);
        CHECK(r.assignment.weights[t][k].item<double>() == Approx(want.weights[static_cast<size_t>(k)]).epsilon(1e-6));
      }
    }
  }
  // The group limit changes choices (else the test above would not see it), and the router
  // still gets a gradient through the weights.
  RouterOptions ungrouped = cases[0];
  ungrouped.n_group = 1;
  CHECK(!torch::equal(route_tokens(logits, ungrouped).assignment.experts,
                      route_tokens(logits, cases[0]).assignment.experts));
  auto x = logits.clone().requires_grad_(true);
  const auto w = route_tokens(x, cases[0]).assignment.weights;  // renormalised: their plain sum is constant
  (w * torch::arange(1, 1 + w.size(1), w.options())).sum().backward();
  CHECK(x.grad().abs().sum().item<double>() > 0);
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

TEST_CASE("SwiGLU experts equal a token-by-token loop over the chosen experts", "[moe]") {
  parallel::SelfCommunicator ep("ep", 0, no_stats()), tp("tp", 0, no_stats());
  auto options = small_options(4, 2);
  options.swiglu = true;
  options.ffn_hidden_size = 12;
  MoELayer layer(options, ep, tp);
  auto params = layer->named_parameters();
  CHECK(params.size() == 1 + 4 * 3);  // the router; gate, up, proj per expert, no biases
  CHECK(params["expert_3_gate_weight"].sizes() == torch::IntArrayRef({12, 8}));
  CHECK(params["expert_3_proj_weight"].sizes() == torch::IntArrayRef({8, 12}));
  auto x = torch::randn({2, 3, 8}, torch::TensorOptions().dtype(torch::kFloat32)).requires_grad_(true);
  auto y = layer->forward(x);
  auto tokens = x.detach().reshape({-1, 8});
  auto r = route_tokens(torch::linear(tokens, params["router_weight"]), 2, 0.0);
  for (int64_t t = 0; t < tokens.size(0); ++t) {
    auto expected = torch::zeros({8});
    for (int64_t c = 0; c < 2; ++c) {
      const auto e = std::to_string(r.assignment.experts[t][c].item<int64_t>());
      auto gate = torch::linear(tokens[t], params["expert_" + e + "_gate_weight"]);
      auto up = torch::linear(tokens[t], params["expert_" + e + "_up_weight"]);
      expected += r.assignment.weights[t][c] *
                  torch::linear(gate * torch::sigmoid(gate) * up, params["expert_" + e + "_proj_weight"]);
    }
    CHECK(torch::allclose(y.reshape({-1, 8})[t].detach(), expected, 1e-6, 1e-6));
  }
  y.sum().backward();
  for (const auto& p : layer->parallel_parameters()) {
    INFO(p.name);
    CHECK(p.tensor.grad().defined());
    CHECK(p.expert == (p.name.find(".experts.") != std::string::npos));
  }
}

TEST_CASE("which blocks have experts: every, first_k_dense_replace, decoder_sparse_step, mlp_only_layers",
          "[moe][config]") {
  MoEConfig moe;
  moe.num_experts = 4;
  auto blocks = [&](int64_t layers) {
    std::vector<int64_t> out;
    for (int64_t l = 0; l < layers; ++l)
      if (is_moe_layer(moe, l)) out.push_back(l);
    return out;
  };
  CHECK(blocks(4) == std::vector<int64_t>{0, 1, 2, 3});
  moe.first_k_dense_replace = 1;  // DeepSeek-V3: the first k dense
  CHECK(blocks(4) == std::vector<int64_t>{1, 2, 3});
  moe.first_k_dense_replace = 0;
  moe.decoder_sparse_step = 2;  // Qwen's rule: (layer + 1) % step == 0
  CHECK(blocks(6) == std::vector<int64_t>{1, 3, 5});
  moe.mlp_only_layers = {3};
  CHECK(blocks(6) == std::vector<int64_t>{1, 5});
  moe.num_experts = 0;
  CHECK(blocks(6).empty());

  auto path = std::filesystem::temp_directory_path() / ("loom_test_moe_blocks_" + std::to_string(::getpid()) + ".yaml");
  std::ofstream(path) << "model:\n  arch: llama\n  num_layers: 4\n  hidden_size: 16\n  num_heads: 2\n"
                         "  moe:\n    num_experts: 4\n    moe_intermediate_size: 8\n    n_shared_experts: 1\n"
                         "    mlp_only_layers: [0, 2]\n"
                         "train:\n  global_batch_size: 2\n  micro_batch_size: 1\n";
  Config c = load_config(path.string());
  resolve_and_validate(c, 2);
  CHECK(c.model.moe.mlp_only_layers == std::vector<int64_t>{0, 2});
  CHECK(c.moe_ffn_size() == 8);
  CHECK_THAT(to_yaml(c), Catch::Contains("mlp_only_layers: 0,2"));
  CHECK(load_config(path.string(), {"model.moe.mlp_only_layers=1"}).model.moe.mlp_only_layers ==
        std::vector<int64_t>{1});
  auto error = [&](std::vector<std::string> overrides, int64_t world) -> std::string {
    try {
      Config bad = load_config(path.string(), overrides);
      resolve_and_validate(bad, world);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  };
  CHECK_THAT(error({"model.moe.mlp_only_layers=1,x"}, 2), Catch::Contains("model.moe.mlp_only_layers"));
  CHECK_THAT(error({"model.moe.mlp_only_layers=4"}, 2),
             Catch::Contains("model.moe.mlp_only_layers") && Catch::Contains("block 4"));
  CHECK_THAT(error({"model.moe.mlp_only_layers=0,1,2,3"}, 2), Catch::Contains("leave every block dense"));
  CHECK_THAT(error({"model.moe.first_k_dense_replace=4"}, 2), Catch::Contains("model.moe.first_k_dense_replace"));
  CHECK_THAT(error({"model.moe.decoder_sparse_step=2", "model.moe.every=2"}, 2),
             Catch::Contains("model.moe.decoder_sparse_step"));
  CHECK_THAT(error({"model.moe.n_shared_experts=1", "parallel.tp=3"}, 3),
             Catch::Contains("model.moe.n_shared_experts"));
  CHECK_THAT(error({"model.moe.moe_intermediate_size=-1"}, 2), Catch::Contains("model.moe.moe_intermediate_size"));
  CHECK(error({}, 2).empty());
  std::filesystem::remove(path);
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
  CHECK_THAT(warnings[0], Catch::Contains("MoE layer 0: expert 2") && Catch::Contains("4.0x the mean") &&
                              Catch::Contains("no all-to-all"));
  // Under expert parallelism the same streak names the all-to-all's hot spot.
  config.parallel.ep = 2;
  launch::MoEMonitor spread(config, {&layer->stats()});
  std::vector<double> hot{1, 1, 10, 1};
  for (int step = 0; step < launch::kHotSteps; ++step) warnings = spread.check_hot({0}, {hot});
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Catch::Contains("all-to-all traffic"));
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
  CHECK_THAT(error({"model.moe.aux_loss_type=seq"}, 8),
             Catch::Contains("model.moe.aux_loss_type") && Catch::Contains("batch, sequence or none"));
  CHECK(error({"model.moe.aux_loss_type=sequence"}, 8).empty());
  CHECK_THAT(error({"model.moe.num_expert=4"}, 8), Catch::Contains("did you mean 'model.moe.num_experts'"));
  std::filesystem::remove(path);
}

TEST_CASE("expert bias: chooses without weighting, moves by rate x sign(mean - load), balances a hot router", "[moe]") {
  // The rule, by hand: loads 10, 2, 4, 0 (mean 4) move the biases by -r, +r, 0, +r.
  std::vector<double> bias{0.5, 0.0, 0.0, -0.25};
  update_expert_bias(bias, {10, 2, 4, 0}, 0.125);
  CHECK(bias == std::vector<double>{0.375, 0.125, 0.0, -0.125});

  // A bias changes the choice, never the weights: those stay the chosen experts' scores.
  const auto logits = torch::tensor({{2.0f, 1.0f, 0.0f, -1.0f}});
  RouterOptions o;
  o.sigmoid = true;
  o.top_k = 1;
  o.bias = torch::tensor({0.0f, 0.0f, 0.0f, 2.0f});
  const auto r = route_tokens(logits, o);
  CHECK(r.assignment.experts[0][0].item<int64_t>() == 3);
  CHECK(r.assignment.weights[0][0].item<double>() == Approx(1.0 / (1.0 + std::exp(1.0))));

  // A router forced to expert 2: with the bias update each step, the loads spread out.
  parallel::SelfCommunicator ep("ep", 0, no_stats()), tp("tp", 0, no_stats());
  auto options = small_options(4, 1);
  options.moe.score = "sigmoid";
  options.moe.bias_update_rate = 0.05;
  MoELayer layer(options, ep, tp);
  {
    torch::NoGradGuard no_grad;
    auto router = layer->named_parameters()["router_weight"];
    torch::manual_seed(6);
    router.copy_(torch::randn_like(router) * 0.1);  // tokens differ in their preferences...
    router[2].add_(0.3);                            // ...but all prefer expert 2
  }
  Config config;
  config.model.num_layers = 1;
  config.model.moe = options.moe;
  launch::MoEMonitor monitor(config, {&layer->stats()});
  REQUIRE(layer->stats().expert_bias.defined());
  std::vector<double> imbalance;  // max / mean load of each step
  std::vector<double> before, after;
  torch::manual_seed(5);
  for (int step = 0; step < 40; ++step) {
    layer->forward(torch::rand({2, 8, 8}) + 0.1);
    std::vector<double> counts;
    for (int64_t e = 0; e < 4; ++e)
      counts.push_back(static_cast<double>(layer->stats().tokens_per_expert[e].item<int64_t>()));
    if (step == 0) before = counts;
    after = counts;
    imbalance.push_back(*std::max_element(counts.begin(), counts.end()) / 4.0);
    // What collect() does after its all-reduce, here on one rank.
    layer->stats().reset();
    auto table = monitor.expert_bias();
    update_expert_bias(table[0], counts, options.moe.bias_update_rate);
    monitor.restore_expert_bias(table, "test");
    if (step == 0) {
      // After the first step the favourite's bias went down, the others' up, by the rate.
      CHECK(layer->stats().expert_bias[2].item<double>() == Approx(-0.05));
      CHECK(layer->stats().expert_bias.sum().item<double>() > -0.05);
    }
  }
  CHECK(before[2] >= 12);  // expert 2 takes most tokens at first
  // Later steps are balanced far better than the first (the mean of the last ten steps' max / mean).
  double late = 0;
  for (size_t i = imbalance.size() - 10; i < imbalance.size(); ++i) late += imbalance[i] / 10.0;
  INFO("first step's imbalance " << imbalance.front() << ", the last ten steps' " << late);
  CHECK(late < 0.75 * imbalance.front());

  // A checkpoint with biases refused by a config without them; one of another shape refused.
  Config plain;
  plain.model.num_layers = 1;
  plain.model.moe = small_options(4, 1).moe;
  launch::MoEMonitor without(plain, {});
  CHECK_THROWS_WITH(without.restore_expert_bias(monitor.expert_bias(), "--resume x"),
                    Catch::Contains("neither model.moe.bias_update_rate > 0 nor model.moe.expert_bias"));
  // A config with a fixed bias (a DeepSeek-V3 fine-tuned at rate 0) takes the saved biases.
  plain.model.moe.expert_bias = true;
  launch::MoEMonitor fixed(plain, {});
  fixed.restore_expert_bias(monitor.expert_bias(), "model.init_from x");
  CHECK(fixed.expert_bias() == monitor.expert_bias());
  CHECK_THROWS_WITH(monitor.restore_expert_bias({{0.0, 0.0}}, "--resume x"), Catch::Contains("1 MoE layers of 4"));
}
