#include <catch2/catch.hpp>
#include <cmath>
#include <map>

#include "models/gpt.h"
#include "models/gpt_flops.h"
#include "parallel/init.h"

using namespace loom::models;
using loom::parallel::init_normal;
using loom::parallel::parameter_seed;

namespace {

GPTOptions tiny_options() {
  GPTOptions o;
  o.vocab_size = 7;
  o.seq_len = 3;
  o.hidden_size = 4;
  o.num_heads = 2;
  o.ffn_hidden_size = 8;
  o.num_layers = 1;
  o.seed = 5;
  return o;
}

using Params = std::map<std::string, torch::Tensor>;

// Row vector x (H) through LayerNorm, written out.
std::vector<double> layer_norm(const std::vector<double>& x, const torch::Tensor& w, const torch::Tensor& b) {
  double mean = 0, var = 0;
  for (double v : x) mean += v;
  mean /= x.size();
  for (double v : x) var += (v - mean) * (v - mean);
  var /= x.size();
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    y[i] = (x[i] - mean) / std::sqrt(var + 1e-5) * w[i].item<double>() + b[i].item<double>();
  }
  return y;
}

// y = W x + b for W [out, in].
std::vector<double> affine(const torch::Tensor& w, const torch::Tensor& b, const std::vector<double>& x) {
  std::vector<double> y(w.size(0));
  for (int64_t o = 0; o < w.size(0); ++o) {
    double s = b.defined() ? b[o].item<double>() : 0.0;
    for (int64_t i = 0; i < w.size(1); ++i) s += w[o][i].item<double>() * x[i];
    y[o] = s;
  }
  return y;
}

double gelu_tanh(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

// The GPT-2 forward of one sequence, position by position, in double precision.
double reference_loss(Params& p, const GPTOptions& o, const std::vector<int64_t>& tokens,
                      const std::vector<int64_t>& targets) {
  const int64_t s = tokens.size(), h = o.hidden_size, heads = o.num_heads, d = h / heads;
  std::vector<std::vector<double>> x(s, std::vector<double>(h));
  for (int64_t t = 0; t < s; ++t) {
    for (int64_t i = 0; i < h; ++i) x[t][i] = p["wte"][tokens[t]][i].item<double>() + p["wpe"][t][i].item<double>();
  }
  const std::string l = "h.0.";
  std::vector<std::vector<double>> q(s), k(s), v(s);
  for (int64_t t = 0; t < s; ++t) {
    auto qkv = affine(p[l + "attn.qkv.weight"], p[l + "attn.qkv.bias"],
                      layer_norm(x[t], p[l + "ln_1.weight"], p[l + "ln_1.bias"]));
    q[t].resize(h), k[t].resize(h), v[t].resize(h);
    for (int64_t head = 0; head < heads; ++head) {
      for (int64_t j = 0; j < d; ++j) {  // rows are [head, (q, k, v), d]
        q[t][head * d + j] = qkv[head * 3 * d + j];
        k[t][head * d + j] = qkv[head * 3 * d + d + j];
        v[t][head * d + j] = qkv[head * 3 * d + 2 * d + j];
      }
    }
  }
  double total = 0.0;
  for (int64_t t = 0; t < s; ++t) {
    std::vector<double> context(h, 0.0);
    for (int64_t head = 0; head < heads; ++head) {
      std::vector<double> scores;
      double max_score = -1e300;
      for (int64_t u = 0; u <= t; ++u) {  // causal: only earlier positions and itself
        double dot = 0;
        for (int64_t j = 0; j < d; ++j) dot += q[t][head * d + j] * k[u][head * d + j];
        scores.push_back(dot / std::sqrt(static_cast<double>(d)));
        max_score = std::max(max_score, scores.back());
      }
      double z = 0;
      for (double& sc : scores) z += (sc = std::exp(sc - max_score));
      for (int64_t u = 0; u <= t; ++u) {
        for (int64_t j = 0; j < d; ++j) context[head * d + j] += scores[u] / z * v[u][head * d + j];
      }
    }
    auto attn = affine(p[l + "attn.proj.weight"], p[l + "attn.proj.bias"], context);
    std::vector<double> y(h);
    for (int64_t i = 0; i < h; ++i) y[i] = x[t][i] + attn[i];
    auto fc =
        affine(p[l + "mlp.fc.weight"], p[l + "mlp.fc.bias"], layer_norm(y, p[l + "ln_2.weight"], p[l + "ln_2.bias"]));
    for (double& f : fc) f = gelu_tanh(f);
    auto mlp = affine(p[l + "mlp.proj.weight"], p[l + "mlp.proj.bias"], fc);
    for (int64_t i = 0; i < h; ++i) y[i] += mlp[i];
    auto logits = affine(p["wte"], torch::Tensor(), layer_norm(y, p["ln_f.weight"], p["ln_f.bias"]));
    double max_logit = *std::max_element(logits.begin(), logits.end());
    double z = 0;
    for (double lg : logits) z += std::exp(lg - max_logit);
    total += max_logit + std::log(z) - logits[targets[t]];
  }
  return total / static_cast<double>(s);
}

}  // namespace

TEST_CASE("GPT forward equals a hand-computed tiny case", "[gpt]") {
  const auto o = tiny_options();
  GPT model(o);
  model->eval();
  // Random values everywhere (biases and norms too) so no term hides behind a zero or a one.
  torch::manual_seed(11);
  Params params;
  {
    torch::NoGradGuard no_grad;
    for (auto& np : model->parallel_parameters()) {
      np.tensor.copy_(torch::randn_like(np.tensor) * 0.5);
      params[np.name] = np.tensor.to(torch::kFloat64);
    }
  }
  const std::vector<int64_t> tokens = {3, 0, 6}, targets = {0, 6, 2};
  auto loss = model->forward(torch::tensor(tokens).view({1, 3}), torch::tensor(targets).view({1, 3}));
  CHECK(loss.item<double>() == Approx(reference_loss(params, o, tokens, targets)).epsilon(1e-5));
}

TEST_CASE("initialisation depends on the seed and the name only", "[gpt]") {
  auto o = tiny_options();
  GPT a(o), b(o);
  o.seed = 6;
  GPT c(o);
  auto pa = a->parallel_parameters(), pb = b->parallel_parameters(), pc = c->parallel_parameters();
  REQUIRE(pa.size() == 2 + 12 + 2);
  for (size_t i = 0; i < pa.size(); ++i) {
    CHECK(pa[i].name == pb[i].name);
    CHECK(torch::equal(pa[i].tensor, pb[i].tensor));
  }
  CHECK_FALSE(torch::equal(pa[0].tensor, pc[0].tensor));
  CHECK(parameter_seed(1, "h.0.mlp.fc.weight") != parameter_seed(1, "h.1.mlp.fc.weight"));
  // The full tensor drawn for a name is the same however it is later sliced.
  auto full = init_normal(3, "wte", {8, 4}, 0.02);
  CHECK(torch::equal(full.narrow(0, 4, 4), init_normal(3, "wte", {8, 4}, 0.02).narrow(0, 4, 4)));
  CHECK(full.std().item<double>() == Approx(0.02).epsilon(0.5));
}

TEST_CASE("an untrained GPT predicts about uniformly and every parameter gets a gradient", "[gpt]") {
  GPTOptions o;
  o.vocab_size = 256;
  o.seq_len = 16;
  o.hidden_size = 32;
  o.num_heads = 4;
  o.ffn_hidden_size = 64;
  o.num_layers = 2;
  GPT model(o);
  auto tokens = torch::randint(0, 256, {2, 16});
  auto loss = model->forward(tokens, torch::randint(0, 256, {2, 16}));
  CHECK(loss.item<double>() == Approx(std::log(256.0)).margin(0.1));
  loss.backward();
  for (const auto& p : model->parallel_parameters()) {
    INFO(p.name);
    REQUIRE(p.tensor.grad().defined());
    CHECK(p.tensor.grad().abs().sum().item<double>() > 0);
  }
  CHECK(model->num_parameters() ==
        256 * 32 + 16 * 32 + 2 * (4 * 32 + 3 * 32 * 32 + 3 * 32 + 32 * 32 + 32 + 2 * 32 * 64 + 64 + 32) + 2 * 32);
}

TEST_CASE("model FLOPs per token: 6 per weight in a product plus 12 L h S for attention", "[gpt]") {
  loom::Config c;
  c.model.num_layers = 2;
  c.model.hidden_size = 8;
  c.model.num_heads = 2;
  c.model.vocab_size = 10;
  c.model.seq_len = 5;
  // Per layer 4 h^2 (attention) + 2 h f (MLP, f = 4h) = 256 + 512 weights; the output layer V h = 80.
  CHECK(gpt_flops_per_token(c) == 6.0 * (2 * (256 + 512) + 80) + 12.0 * 2 * 8 * 5);
  // MoE in every other layer (layers 0): top-2 of 4 experts plus the router (h x E).
  c.model.moe.num_experts = 4;
  c.model.moe.top_k = 2;
  c.model.moe.every = 2;
  CHECK(gpt_flops_per_token(c) == 6.0 * ((256 + 2 * 512 + 32) + (256 + 512) + 80) + 12.0 * 2 * 8 * 5);
  // One multi-token prediction module: eh_proj (2 h^2 = 128), a block at layer 2 (an MoE one under
  // every = 2), the output layer again (80), and a third layer's attention products.
  c.model.mtp.depth = 1;
  CHECK(gpt_flops_per_token(c) == 6.0 * (2 * (256 + 2 * 512 + 32) + (256 + 512) + 2 * 80 + 128) + 12.0 * 3 * 8 * 5);
}
