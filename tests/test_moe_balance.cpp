// DeepSeek-V3's sequence-wise balance loss (model.moe.aux_loss_type: sequence) against a case
// worked by hand and against each sequence routed alone, softmax and sigmoid scores.
#include <catch2/catch.hpp>

#include "models/moe.h"

using namespace loom;
using namespace loom::models;

TEST_CASE("sequence-wise balance loss: each sequence's own loads, averaged over the sequences", "[moe]") {
  // Two sequences of two tokens, two experts, top 1: sequence 0 sends both tokens to expert 0 with
  // probabilities summing to (1.5, 0.5), sequence 1 both to expert 1, (0.2, 1.8).
  // 2 / (2^2 x 1) x (1.5 x 2) = 1.5 and 2 / 4 x (1.8 x 2) = 1.8: mean 1.65.
  auto loss = load_balancing_loss(torch::tensor({{1.5, 0.5}, {0.2, 1.8}}), torch::tensor({{2, 0}, {0, 2}}), 2, 1);
  CHECK(loss.item<double>() == Approx(1.65).epsilon(1e-6));
  // The layer's figure is the mean of the batch loss of each sequence routed alone; the batch loss
  // of all the tokens together differs.
  auto stats = std::make_shared<parallel::CommStats>();
  parallel::SelfCommunicator ep("ep", 0, stats), tp("tp", 0, stats);
  MoELayerOptions options;
  options.hidden_size = 8;
  options.ffn_hidden_size = 16;
  options.moe.num_experts = 4;
  options.moe.top_k = 2;
  options.moe.aux_loss_coeff = 0.0;
  options.moe.z_loss_coeff = 0.0;
  options.seed = 7;
  options.moe.aux_loss_type = "sequence";
  MoELayer layer(options, ep, tp);
  torch::manual_seed(5);
  auto x = torch::randn({3, 5, 8});
  torch::NoGradGuard no_grad;
  layer->forward(x);
  auto router = layer->named_parameters()["router_weight"];
  double expected = 0;
  for (int64_t b = 0; b < 3; ++b) {
    auto r = route_tokens(torch::linear(x[b], router), 2, 0.0);
    expected += load_balancing_loss(r.probs.sum(0), r.counts, 5, 2).item<double>() / 3;
  }
  CHECK(layer->stats().aux_loss.item<double>() == Approx(expected).epsilon(1e-6));
  auto all = route_tokens(torch::linear(x.reshape({-1, 8}), router), 2, 0.0);
  CHECK(std::abs(load_balancing_loss(all.probs.sum(0), all.counts, 15, 2).item<double>() - expected) > 1e-3);
  // Sigmoid scores enter normalised per token (DeepSeek-V3's s'), sequence by sequence too.
  options.moe.score = "sigmoid";
  MoELayer sigmoid_layer(options, ep, tp);
  sigmoid_layer->forward(x);
  auto sigmoid_router = sigmoid_layer->named_parameters()["router_weight"];
  RouterOptions sigmoid_options;
  sigmoid_options.top_k = 2;
  sigmoid_options.sigmoid = true;
  double sigmoid_expected = 0;
  for (int64_t b = 0; b < 3; ++b) {
    auto r = route_tokens(torch::linear(x[b], sigmoid_router), sigmoid_options);
    auto normalised = r.probs / (r.probs.sum(-1, true) + 1e-20);
    sigmoid_expected += load_balancing_loss(normalised.sum(0), r.counts, 5, 2).item<double>() / 3;
  }
  CHECK(sigmoid_layer->stats().aux_loss.item<double>() == Approx(sigmoid_expected).epsilon(1e-6));
}
