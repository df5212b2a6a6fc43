// The pieces of a Llama-shaped model against their formulas, worked by hand:
// rotary embeddings (rotate-half, with and without Llama 3's frequency scaling),
// RMSNorm, SwiGLU, and grouped-query attention's grouping of query heads.
#include <catch2/catch.hpp>
#include <cmath>

#include "models/gpt.h"
#include "models/mlp.h"
#include "models/norm.h"
#include "models/rotary.h"
#include "models/self_attention.h"
#include "models/swiglu.h"

using namespace loom;
using namespace loom::models;

TEST_CASE("RoPE rotates feature pairs (i, i + d/2) by position x theta^(-2i/d)", "[llama]") {
  // d = 4, theta = 10000: frequencies 1 and 0.01; pairs (x0, x2) and (x1, x3).
  RotaryEmbedding rope(4, 128, 10000.0, RopeScalingConfig{});
  auto x = torch::tensor({1.0f, 2.0f, 3.0f, 4.0f}).view({1, 1, 1, 4});
  for (int64_t position : {0, 1, 100}) {
    const double p = static_cast<double>(position), a = p * 1.0, b = p * 0.01;
    const std::vector<double> expected{1 * std::cos(a) - 3 * std::sin(a), 2 * std::cos(b) - 4 * std::sin(b),
                                       3 * std::cos(a) + 1 * std::sin(a), 4 * std::cos(b) + 2 * std::sin(b)};
    auto out = rope.apply(x, position).view({4});
    for (int64_t i = 0; i < 4; ++i) {
      INFO("position " << position << " feature " << i);
      CHECK(out[i].item<double>() == Approx(expected[static_cast<size_t>(i)]).margin(1e-6));
    }
  }
  // A sequence's token s sits at FIRST + s: the same rotation as one token at that position.
  auto seq = torch::randn({2, 5, 3, 4});
  auto whole = rope.apply(seq, 10);
  CHECK(torch::allclose(whole.narrow(1, 3, 1), rope.apply(seq.narrow(1, 3, 1), 13)));
}

TEST_CASE("RoPE's own backward gives the composition's gradient, and its forward the composition's values", "[llama]") {
  // fp64 (tables in x's dtype): the three-kernel form against x cos + rotate_half(x) sin through autograd.
  RotaryEmbedding rope(8, 64, 10000.0, RopeScalingConfig{});
  auto x = torch::randn({2, 6, 3, 8}, torch::kFloat64).requires_grad_(true);
  auto upstream = torch::randn({2, 6, 3, 8}, torch::kFloat64);
  auto angles = torch::outer(torch::arange(4, 10, torch::kDouble), rope_inverse_frequencies(8, 10000.0, {}));
  auto both = torch::cat({angles, angles}, -1).unsqueeze(1);  // [S, 1, d], positions 4..9
  // The tables hold fp32 values (in x's dtype after).
  const auto cos = both.cos().to(torch::kFloat).to(torch::kDouble),
             sin = both.sin().to(torch::kFloat).to(torch::kDouble);
  auto x_ref = x.detach().clone().requires_grad_(true);
  auto reference = x_ref * cos + rotate_half(x_ref) * sin;
  auto out = rope.apply(x, 4);
  CHECK(torch::allclose(out, reference, 1e-12, 1e-12));
  (out * upstream).sum().backward();
  (reference * upstream).sum().backward();
  CHECK(torch::allclose(x.grad(), x_ref.grad(), 1e-12, 1e-12));
  // A non-contiguous x (a view of a packed projection) and no autograd: the same values.
  auto packed = torch::randn({2, 6, 3, 2, 8}, torch::kFloat64);
  auto view = packed.unbind(3)[1];
  torch::NoGradGuard no_grad;
  CHECK(torch::allclose(rope.apply(view, 4), view * cos + rotate_half(view) * sin, 1e-12, 1e-12));
}

TEST_CASE("Llama 3 scaling keeps short wavelengths, divides long ones, blends between", "[llama]") {
  // d = 8, theta = 10000: frequencies 1, 0.1, 0.01, 0.001 (wavelengths 6.3, 63, 628, 6283).
  RopeScalingConfig scaling;
  scaling.type = RopeScalingKind::llama3;
  scaling.factor = 8;
  scaling.low_freq_factor = 1;
  scaling.high_freq_factor = 4;
  scaling.original_max_position_embeddings = 1024;  // kept below 1024 / 4 = 256, divided above 1024 / 1
  auto f = rope_inverse_frequencies(8, 10000.0, scaling);
  CHECK(f[0].item<double>() == Approx(1.0));
  CHECK(f[1].item<double>() == Approx(0.1));
  const double wavelength = 2 * M_PI / 0.01, smooth = (1024 / wavelength - 1) / (4 - 1);
  CHECK(f[2].item<double>() == Approx((1 - smooth) * 0.01 / 8 + smooth * 0.01));
  CHECK(f[3].item<double>() == Approx(0.001 / 8));
  // Unscaled for comparison.
  auto plain = rope_inverse_frequencies(8, 10000.0, RopeScalingConfig{});
  CHECK(plain[2].item<double>() == Approx(0.01));
  CHECK(plain[3].item<double>() == Approx(0.001));
}

TEST_CASE("YaRN keeps fast frequencies, divides slow ones, ramps between, and scales cos and sin", "[llama]") {
  // d = 8, theta = 10000: frequencies 1, 0.1, 0.01, 0.001. Over 64 original positions the ramp runs
  // from dimension floor(8 ln(64 / (32 2 pi)) / (2 ln 10000)) = floor(-0.50) -> 0 to
  // ceil(8 ln(64 / (1 2 pi)) / (2 ln 10000)) = ceil(1.01) = 2: pair i keeps 1 - i / 2 of its frequency.
  RopeScalingConfig scaling;
  scaling.type = RopeScalingKind::yarn;
  scaling.factor = 4;
  scaling.original_max_position_embeddings = 64;
  scaling.mscale = 0.8;
  scaling.mscale_all_dim = 1.0;
  auto f = rope_inverse_frequencies(8, 10000.0, scaling);
  CHECK(f[0].item<double>() == Approx(1.0));
  CHECK(f[1].item<double>() == Approx(0.1 * (0.5 / 4 + 0.5)));
  CHECK(f[2].item<double>() == Approx(0.01 / 4));
  CHECK(f[3].item<double>() == Approx(0.001 / 4));
  // cos and sin times (0.1 x 0.8 ln 4 + 1) / (0.1 ln 4 + 1); latent attention's softmax scale times (0.1 ln 4 + 1)^2.
  const double all_dim = 0.1 * std::log(4.0) + 1;
  CHECK(rope_attention_factor(scaling) == Approx((0.08 * std::log(4.0) + 1) / all_dim));
  CHECK(latent_softmax_scale_factor(scaling) == Approx(all_dim * all_dim));
  RotaryEmbedding rope(8, 16, 10000.0, scaling);
  auto x = torch::ones({1, 1, 1, 8});
  CHECK(rope.apply(x, 0).view({8})[0].item<double>() == Approx(rope_attention_factor(scaling)));
  scaling.mscale = 0;  // without both: 0.1 ln(factor) + 1
  CHECK(rope_attention_factor(scaling) == Approx(all_dim));
}

TEST_CASE("interleaved RoPE rotates adjacent pairs (x0, x1), (x2, x3) and lays out firsts, then seconds", "[llama]") {
  // DeepSeek's layout, as transformers' apply_rotary_pos_emb_interleave computes it.
  RotaryEmbedding rope(4, 128, 10000.0, RopeScalingConfig{}, /*interleave=*/true);
  auto x = torch::tensor({1.0f, 2.0f, 3.0f, 4.0f}).view({1, 1, 1, 4});
  const double a = 7.0, b = 0.07;  // position 7, frequencies 1 and 0.01
  const std::vector<double> expected{1 * std::cos(a) - 2 * std::sin(a), 3 * std::cos(b) - 4 * std::sin(b),
                                     2 * std::cos(a) + 1 * std::sin(a), 4 * std::cos(b) + 3 * std::sin(b)};
  auto out = rope.apply(x, 7).view({4});
  for (int64_t i = 0; i < 4; ++i) CHECK(out[i].item<double>() == Approx(expected[static_cast<size_t>(i)]).margin(1e-6));
}

TEST_CASE("RMSNorm is weight * x / sqrt(mean(x^2) + eps), without a bias", "[llama]") {
  Norm norm(NormKind::rmsnorm, "ln", 4, false, 1e-5);
  CHECK_FALSE(norm->bias.defined());
  {
    torch::NoGradGuard no_grad;
    norm->weight.copy_(torch::tensor({1.0f, 2.0f, 0.5f, -1.0f}));
  }
  auto x = torch::tensor({1.0f, -2.0f, 3.0f, 4.0f}).view({1, 1, 4});
  const double rms = std::sqrt((1 + 4 + 9 + 16) / 4.0 + 1e-5);
  auto out = norm->forward(x).view({4});
  const std::vector<double> expected{1 / rms, 2 * -2 / rms, 0.5 * 3 / rms, -1 * 4 / rms};
  for (int64_t i = 0; i < 4; ++i) CHECK(out[i].item<double>() == Approx(expected[static_cast<size_t>(i)]));
}

TEST_CASE("SwiGLU is silu(gate) * up, silu(g) = g / (1 + exp(-g)), with its derivatives", "[llama]") {
  auto g = torch::tensor({-2.0, 0.0, 1.5}, torch::kDouble).requires_grad_();
  auto u = torch::tensor({3.0, 5.0, -2.0}, torch::kDouble).requires_grad_();
  auto out = swiglu(g, u);
  auto dy = torch::tensor({0.5, -1.0, 2.0}, torch::kDouble);
  out.backward(dy);
  for (int64_t i = 0; i < 3; ++i) {
    const double gi = g[i].item<double>(), ui = u[i].item<double>(), dyi = dy[i].item<double>();
    const double s = 1 / (1 + std::exp(-gi));
    CHECK(out[i].item<double>() == Approx(gi * s * ui));
    CHECK(u.grad()[i].item<double>() == Approx(dyi * gi * s));
    CHECK(g.grad()[i].item<double>() == Approx(dyi * ui * (s + gi * s * (1 - s))));
  }
  // Large tensors are cut into pieces over the rank's threads: the same numbers as the composed ops.
  auto big_g = torch::randn({1 << 19}), big_u = torch::randn({1 << 19});
  CHECK(torch::equal(swiglu(big_g, big_u), torch::silu(big_g) * big_u));
}

TEST_CASE("grouped-query attention: query head j reads kv head j / (heads / kv heads)", "[llama]") {
  GPTOptions o;
  o.hidden_size = 16;
  o.num_heads = 4;
  o.num_kv_heads = 2;
  o.seq_len = 6;
  o.position = PositionKind::rope;
  o.bias = o.qkv_bias = false;
  parallel::SelfCommunicator tp("tp", 0, std::make_shared<parallel::CommStats>());
  SelfAttention attn(o, 0, TensorParallelContext{&tp});
  auto named = attn->named_parameters();
  const auto wq = named["q.weight"], wkv = named["kv.weight"], wo = named["proj.weight"];
  REQUIRE(wq.sizes() == torch::IntArrayRef({16, 16}));
  REQUIRE(wkv.sizes() == torch::IntArrayRef({2 * 2 * 4, 16}));  // [kv heads, (k, v), d] rows

  torch::manual_seed(3);
  auto x = torch::randn({2, 6, 16});
  auto out = attn->forward(x);

  // By hand: each query head with its group's key and value, causal softmax, output projection.
  const int64_t d = 4;
  RotaryEmbedding rope(d, 6, 10000.0, RopeScalingConfig{});
  auto q = rope.apply(torch::linear(x, wq).view({2, 6, 4, d}));
  auto kv = torch::linear(x, wkv).view({2, 6, 2, 2, d});
  auto k = rope.apply(kv.select(3, 0)), v = kv.select(3, 1);
  std::vector<torch::Tensor> heads;
  auto mask = torch::ones({6, 6}, torch::kBool).triu(1);
  for (int64_t j = 0; j < 4; ++j) {
    const int64_t g = j / 2;
    auto qj = q.select(2, j), kj = k.select(2, g), vj = v.select(2, g);  // [B, S, d]
    auto scores = torch::matmul(qj, kj.transpose(1, 2)) / std::sqrt(static_cast<double>(d));
    heads.push_back(torch::matmul(torch::softmax(scores.masked_fill(mask, -INFINITY), -1), vj));
  }
  auto expected = torch::linear(torch::cat(heads, -1), wo);
  CHECK(torch::allclose(out, expected, 1e-5, 1e-6));
}

TEST_CASE("a Llama-shaped GPT has the parameters its shape says, named as in checkpoints", "[llama]") {
  GPTOptions o;
  o.vocab_size = 10;
  o.seq_len = 4;
  o.hidden_size = 8;
  o.num_heads = 4;
  o.num_kv_heads = 2;
  o.ffn_hidden_size = 12;
  o.num_layers = 1;
  o.norm = NormKind::rmsnorm;
  o.activation = Activation::swiglu;
  o.position = PositionKind::rope;
  o.bias = o.qkv_bias = o.tie_embeddings = false;
  GPT model(o);
  std::vector<std::string> names;
  int64_t count = 0;
  for (const auto& p : model->parallel_parameters()) {
    names.push_back(p.name);
    count += p.tensor.numel();
  }
  CHECK(names == std::vector<std::string>{"wte", "h.0.ln_1.weight", "h.0.attn.q.weight", "h.0.attn.kv.weight",
                                          "h.0.attn.proj.weight", "h.0.ln_2.weight", "h.0.mlp.gate.weight",
                                          "h.0.mlp.up.weight", "h.0.mlp.proj.weight", "ln_f.weight", "lm_head"});
  // wte + lm_head 2 V H, norms 3 H, q H H, kv 2 (H / 2) H, proj H H, gate/up/proj 3 H F.
  CHECK(count == 2 * 10 * 8 + 3 * 8 + 64 + 2 * 4 * 8 + 64 + 3 * 8 * 12);
  CHECK(model->num_parameters() == count);
}
