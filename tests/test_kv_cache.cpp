// Incremental decoding with a KV cache against the training forward: the logits of
// positions fed in pieces (a prefill, then one position at a time, then a few) equal
// those of the whole sequence at once, for GPT-2 (learned positions, multi-head) and
// Llama (rotary positions, grouped-query attention); and the training loss is the
// cross-entropy of GPT::logits, so both read the same model.
#include <catch2/catch.hpp>

#include "models/gpt.h"
#include "models/kv_cache.h"

using namespace loom;
using namespace loom::models;

namespace {

GPTOptions gpt2_options() {
  GPTOptions o;
  o.vocab_size = 50;
  o.seq_len = 16;
  o.hidden_size = 32;
  o.num_heads = 4;
  o.ffn_hidden_size = 64;
  o.num_layers = 2;
  o.seed = 7;
  return o;
}

GPTOptions llama_options() {
  GPTOptions o = gpt2_options();
  o.num_kv_heads = 2;
  o.norm = NormKind::rmsnorm;
  o.activation = Activation::swiglu;
  o.position = PositionKind::rope;
  o.bias = o.qkv_bias = false;
  o.tie_embeddings = false;
  return o;
}

// The logits of TOKENS [B, S] fed to a fresh cache in pieces of the given SIZES (summing to S).
torch::Tensor cached_logits(GPT& model, const torch::Tensor& tokens, const std::vector<int64_t>& sizes) {
  KVCache cache(model->blocks->size(), tokens.size(1));
  std::vector<torch::Tensor> pieces;
  int64_t first = 0;
  for (int64_t size : sizes) {
    pieces.push_back(model->forward_cached(tokens.narrow(1, first, size), cache));
    first += size;
    CHECK(cache.length() == first);
  }
  return torch::cat(pieces, 1);
}

void check_incremental(const GPTOptions& options) {
  GPT model(options);
  model->eval();
  torch::NoGradGuard no_grad;
  // Weights of init scale give nearly uniform logits; larger ones make the attention matter.
  for (auto& p : model->parameters()) p.mul_(8.0);
  auto tokens = torch::randint(options.vocab_size, {2, options.seq_len}, torch::kLong);
  auto whole = model->logits(tokens);
  REQUIRE(whole.sizes() == torch::IntArrayRef({2, options.seq_len, options.vocab_size}));
  const auto pieces = cached_logits(model, tokens, {5, 1, 1, 1, 3, 1, 4});
  INFO("largest difference " << (pieces - whole).abs().max().item<double>());
  CHECK(torch::allclose(pieces, whole, 1e-4, 1e-4));
  // Attention that ignored the cache (each piece alone) would give other logits.
  KVCache alone(model->blocks->size(), options.seq_len);
  auto last = model->forward_cached(tokens.narrow(1, options.seq_len - 1, 1), alone);
  CHECK_FALSE(torch::allclose(last, whole.narrow(1, options.seq_len - 1, 1), 1e-3, 1e-3));
  // The training loss reads the same logits.
  auto targets = torch::randint(options.vocab_size, {2, options.seq_len}, torch::kLong);
  auto loss = model->forward(tokens, targets);
  auto expected = torch::cross_entropy_loss(whole.view({-1, options.vocab_size}), targets.view({-1}));
  CHECK(loss.item<double>() == Approx(expected.item<double>()).epsilon(1e-5));
}

}  // namespace

TEST_CASE("GPT-2: logits with a KV cache equal the whole sequence's", "[kv_cache]") {
  torch::manual_seed(3);
  check_incremental(gpt2_options());
}

TEST_CASE("Llama (RoPE, GQA): logits with a KV cache equal the whole sequence's", "[kv_cache]") {
  torch::manual_seed(4);
  check_incremental(llama_options());
}

TEST_CASE("The KV cache refuses positions beyond its capacity and model.seq_len", "[kv_cache]") {
  KVCache cache(1, 3);
  auto k = torch::zeros({1, 2, 1, 4});
  cache.append(0, k, k);
  CHECK(cache.length() == 2);
  CHECK_THROWS_WITH(cache.append(0, k, k), Catch::Contains("positions up to 4 but the cache holds 3"));
  GPT model(gpt2_options());
  model->eval();
  torch::NoGradGuard no_grad;
  KVCache big(2, 32);
  model->forward_cached(torch::zeros({1, 16}, torch::kLong), big);
  CHECK_THROWS_WITH(model->forward_cached(torch::zeros({1, 1}, torch::kLong), big),
                    Catch::Contains("model.seq_len is 16"));
}
