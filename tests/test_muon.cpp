#include <algorithm>
#include <catch2/catch.hpp>
#include <set>
#include <string>

#include "core/config.h"
#include "core/errors.h"
#include "core/muon_groups.h"
#include "launch/make_optimizer.h"
#include "models/gpt.h"
#include "optim/muon.h"
#include "parallel/layer_ownership.h"

using namespace loom;

namespace {

// The names Muon trains and the names AdamW trains, of a one-layer model of CONFIG.
std::pair<std::set<std::string>, std::set<std::string>> groups_of(Config config) {
  resolve_model_defaults(config);
  models::GPT model(models::GPTOptions::from_config(config));
  std::set<std::string> muon, adamw;
  for (const auto& p : model->parallel_parameters())
    (launch::muon_parameter(p, config.train.muon) ? muon : adamw).insert(p.name);
  return {muon, adamw};
}

Config one_layer(const std::string& arch) {
  Config c;
  c.model.arch = from_string<ModelArch>(arch);
  c.model.num_layers = 1;
  c.model.hidden_size = 16;
  c.model.num_heads = 4;
  c.model.vocab_size = 32;
  c.model.seq_len = 8;
  if (arch == "llama") {
    c.model.num_kv_heads = 2;
    c.set_keys.insert("model.num_kv_heads");
  }
  return c;
}

}  // namespace

// Non-square Gaussian matrices: a square one can have a singular value too small for five steps to lift.
TEST_CASE("Newton-Schulz leaves singular values near 1, wide or tall alike", "[optim][muon]") {
  torch::manual_seed(3);
  for (const auto& shape : std::vector<std::vector<int64_t>>{{16, 8}, {8, 16}, {32, 8}}) {
    const auto x = torch::randn(shape) * 7.0;
    const auto s = torch::linalg_svdvals(optim::newton_schulz(x, 5));
    INFO(shape[0] << " x " << shape[1] << ": " << s);
    CHECK(s.min().item<double>() > 0.5);
    CHECK(s.max().item<double>() < 1.3);
  }
  // Transposing the input transposes the output (the tall case runs on X^T).
  const auto tall = torch::randn({12, 5});
  CHECK(torch::allclose(optim::newton_schulz(tall, 5), optim::newton_schulz(tall.t().contiguous(), 5).t(), 1e-5, 1e-6));
  // The bf16 iteration (train.muon.ns_dtype: bf16) is an approximation of the fp32 one: fp32 out,
  // singular values near 1 as well, within bf16's coarser steps.
  const auto coarse = optim::newton_schulz(tall, 5, torch::kBFloat16);
  CHECK(coarse.scalar_type() == torch::kFloat);
  const auto s = torch::linalg_svdvals(coarse);
  CHECK(s.min().item<double>() > 0.5);
  CHECK(s.max().item<double>() < 1.4);
  CHECK(!torch::equal(coarse, optim::newton_schulz(tall, 5)));
}

TEST_CASE("Muon takes the defined step, and orthogonalises a fused q, k, v matrix by matrix", "[optim][muon]") {
  torch::manual_seed(4);
  const int64_t heads = 2, d = 3, n = 6;
  auto w = torch::randn({heads * 3 * d, n});
  const auto start = w.clone();
  const auto g = torch::randn({heads * 3 * d, n});
  w.mutable_grad() = g.clone();
  optim::MuonOptions options;
  options.weight_decay = 0.1;
  options.lr_scale = 2.0;
  optim::Muon muon({w}, {{heads, 3}}, options);
  muon.step(0.01);
  // By hand: B = G; Nesterov U = G + 0.95 G; each of q, k, v ([heads, 3, d] rows) orthogonalised
  // apart, scaled by 0.2 sqrt(max(heads d, n)); lr 0.01 x 2.
  const double lr = 0.02;
  const auto u = (g * 1.95).view({heads, 3, d, n});
  auto expected = (start * (1 - lr * 0.1)).view({heads, 3, d, n});
  for (int64_t part = 0; part < 3; ++part) {
    const auto matrix = u.select(1, part).reshape({heads * d, n});
    const auto x = optim::newton_schulz(matrix, 5) * (0.2 * std::sqrt(6.0));
    expected.select(1, part).sub_(lr * x.view({heads, d, n}));
  }
  CHECK(torch::allclose(w, expected.view({heads * 3 * d, n}), 1e-5, 1e-6));
  CHECK(muon.state_bytes() == heads * 3 * d * n * 4);
  CHECK(torch::allclose(muon.moments(0).first, g));
}

TEST_CASE("Muon's group is the blocks' 2-D weights: of a GPT, a Llama and an MoE, by name", "[optim][muon]") {
  const auto [gpt_muon, gpt_adamw] = groups_of(one_layer("gpt2"));
  CHECK(gpt_muon == std::set<std::string>{"h.0.attn.qkv.weight", "h.0.attn.proj.weight", "h.0.mlp.fc.weight",
                                          "h.0.mlp.proj.weight"});
  CHECK(gpt_adamw.count("wte"));
  CHECK(gpt_adamw.count("wpe"));
  CHECK(gpt_adamw.count("h.0.ln_1.weight"));
  CHECK(gpt_adamw.count("h.0.attn.qkv.bias"));
  const auto [llama_muon, llama_adamw] = groups_of(one_layer("llama"));
  CHECK(llama_muon == std::set<std::string>{"h.0.attn.q.weight", "h.0.attn.kv.weight", "h.0.attn.proj.weight",
                                            "h.0.mlp.gate.weight", "h.0.mlp.up.weight", "h.0.mlp.proj.weight"});
  CHECK(llama_adamw.count("lm_head"));
  CHECK(llama_adamw.count("h.0.ln_2.weight"));
  auto moe = one_layer("gpt2");
  moe.model.moe.num_experts = 3;
  const auto [moe_muon, moe_adamw] = groups_of(moe);
  int64_t experts = 0;
  for (const auto& name : moe_muon) experts += name.find("experts") != std::string::npos ? 1 : 0;
  CHECK(experts == 2 * 3);  // each expert's fc and proj, apart
  bool router_in_adamw = false;
  for (const auto& name : moe_adamw) router_in_adamw |= name.find("router") != std::string::npos;
  CHECK(router_in_adamw);
  // The fused attention weights split into their logical matrices.
  Config llama = one_layer("llama");
  resolve_model_defaults(llama);
  CHECK(launch::muon_split({"h.0.attn.qkv.weight"}, llama).parts == 3);
  CHECK(launch::muon_split({"h.0.attn.kv.weight"}, llama).groups == 2);
  CHECK(launch::muon_split({"h.0.mlp.up.weight"}, llama).parts == 1);
}

TEST_CASE("ZeRO-1's layer-wise ownership gives whole matrices to ranks, balanced by Newton-Schulz cost",
          "[optim][muon]") {
  using loom::parallel::balance_owners;
  using loom::parallel::newton_schulz_cost;
  // A Llama-like block set: q, k, v (as one fused weight of three), o, gate, up, down, over 4 layers.
  const int64_t qkv = 3, one = 1;
  std::vector<double> costs;
  for (int layer = 0; layer < 4; ++layer) {
    costs.push_back(newton_schulz_cost(3 * 256, 256, qkv));
    costs.push_back(newton_schulz_cost(256, 256, one));
    for (int m = 0; m < 3; ++m) costs.push_back(newton_schulz_cost(m == 2 ? 256 : 688, m == 2 ? 688 : 256, one));
  }
  // The fused weight costs its three matrices, not one 768 x 256 matrix.
  CHECK(newton_schulz_cost(3 * 256, 256, qkv) == Approx(3 * newton_schulz_cost(256, 256, one)));
  for (int64_t ranks : {1, 2, 3, 4, 7}) {
    const auto owner = balance_owners(costs, ranks);
    REQUIRE(owner.size() == costs.size());
    std::vector<double> load(static_cast<size_t>(ranks), 0.0);
    for (size_t i = 0; i < costs.size(); ++i) {
      REQUIRE(owner[i] >= 0);
      REQUIRE(owner[i] < ranks);
      load[static_cast<size_t>(owner[i])] += costs[i];
    }
    const double largest = *std::max_element(costs.begin(), costs.end());
    const double most = *std::max_element(load.begin(), load.end()),
                 least = *std::min_element(load.begin(), load.end());
    // Greedy by decreasing cost: no rank is more than one matrix's cost above the least loaded.
    CHECK(most - least <= largest + 1e-6);
    if (ranks > 1) CHECK(least > 0);               // 20 matrices: every rank owns some
    CHECK(balance_owners(costs, ranks) == owner);  // the same answer every time, on every rank
  }
  // Two equal matrices on two ranks: one each.
  CHECK(balance_owners({1.0, 1.0}, 2) == std::vector<int64_t>{0, 1});
}

TEST_CASE("train.muon.include and exclude move parameters between the groups by name pattern", "[optim][muon]") {
  CHECK(name_matches("h.*.attn.proj.weight", "h.12.attn.proj.weight"));
  CHECK_FALSE(name_matches("h.*.attn.proj.weight", "h.1.attn.proj.bias"));
  CHECK(name_matches("*", "wte"));
  CHECK(name_matches("h.*.mlp.*", "h.0.mlp.experts.3.fc.weight"));
  CHECK_FALSE(name_matches("lm_head", "lm_head.weight"));
  CHECK(name_patterns(" a , b.*,, ") == std::vector<std::string>{"a", "b.*"});

  auto config = one_layer("llama");
  config.model.tie_embeddings = false;
  config.set_keys.insert("model.tie_embeddings");
  config.train.muon.exclude = "h.*.attn.proj.weight";
  config.train.muon.include = "lm_head";
  const auto [muon, adamw] = groups_of(config);
  CHECK(muon.count("lm_head") == 1);
  CHECK(muon.count("h.0.attn.proj.weight") == 0);
  CHECK(adamw.count("h.0.attn.proj.weight") == 1);
  CHECK(muon.count("h.0.mlp.fc_in.weight") + muon.count("h.0.mlp.gate.weight") + muon.count("h.0.mlp.fc.weight") >= 1);
  // Exclude wins over include and over the default.
  config.train.muon.exclude = "lm_head,h.*";
  const auto [none, all] = groups_of(config);
  CHECK(none.empty());
  // A norm is not a matrix: including it is refused, naming the key.
  config.train.muon.exclude = "";
  config.train.muon.include = "h.*.ln_1.weight";
  CHECK_THROWS_WITH(groups_of(config), Catch::Contains("config key 'train.muon.include'") &&
                                           Catch::Contains("h.0.ln_1.weight") && Catch::Contains("matrices only"));
}
