#include "models/gpt.h"

#include <cmath>

#include "models/init.h"

namespace loom::models {
namespace {

constexpr double kInitStd = 0.02;
constexpr double kLayerNormEps = 1e-5;

torch::Tensor layer_norm(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
  return torch::layer_norm(x, {x.size(-1)}, w, b, kLayerNormEps);
}

}  // namespace

GPTOptions GPTOptions::from_config(const Config& config) {
  GPTOptions o;
  o.vocab_size = config.model.vocab_size;
  o.seq_len = config.model.seq_len;
  o.hidden_size = config.model.hidden_size;
  o.num_heads = config.model.num_heads;
  o.ffn_hidden_size = config.ffn_size();
  o.num_layers = config.model.num_layers;
  o.dropout = config.model.dropout;
  o.seed = static_cast<uint64_t>(config.train.seed);
  return o;
}

GPTInputStageImpl::GPTInputStageImpl(const GPTOptions& options) : options_(options) {
  wte_ = register_parameter("wte", init_normal(options.seed, "wte", {options.vocab_size, options.hidden_size}, kInitStd));
  wpe_ = register_parameter("wpe", init_normal(options.seed, "wpe", {options.seq_len, options.hidden_size}, kInitStd));
}

torch::Tensor GPTInputStageImpl::forward(const torch::Tensor& tokens) {
  const int64_t s = tokens.size(1);
  auto hidden = torch::embedding(wte_, tokens) + wpe_.narrow(0, 0, s);
  return torch::dropout(hidden, options_.dropout, is_training());
}

std::vector<NamedParameter> GPTInputStageImpl::named_parameters_global() const {
  return {{"wte", wte_}, {"wpe", wpe_}};
}

GPTBlockImpl::GPTBlockImpl(const GPTOptions& options, int64_t layer) : options_(options), layer_(layer) {
  const int64_t h = options.hidden_size, f = options.ffn_hidden_size;
  const std::string p = "h." + std::to_string(layer) + ".";
  // GPT-2 scales the init of the projections that feed the residual stream by 1/sqrt(2L).
  const double residual_std = kInitStd / std::sqrt(2.0 * static_cast<double>(options.num_layers));
  ln1_w_ = register_parameter("ln_1_weight", torch::ones({h}));
  ln1_b_ = register_parameter("ln_1_bias", torch::zeros({h}));
  // QKV rows are laid out head by head ([heads, 3, head_dim]) so that a split of
  // the heads across tensor-parallel ranks is a contiguous slice of rows.
  qkv_w_ = register_parameter("qkv_weight", init_normal(options.seed, p + "attn.qkv.weight", {3 * h, h}, kInitStd));
  qkv_b_ = register_parameter("qkv_bias", torch::zeros({3 * h}));
  proj_w_ = register_parameter("proj_weight", init_normal(options.seed, p + "attn.proj.weight", {h, h}, residual_std));
  proj_b_ = register_parameter("proj_bias", torch::zeros({h}));
  ln2_w_ = register_parameter("ln_2_weight", torch::ones({h}));
  ln2_b_ = register_parameter("ln_2_bias", torch::zeros({h}));
  fc_w_ = register_parameter("fc_weight", init_normal(options.seed, p + "mlp.fc.weight", {f, h}, kInitStd));
  fc_b_ = register_parameter("fc_bias", torch::zeros({f}));
  fc_proj_w_ = register_parameter("fc_proj_weight",
                                  init_normal(options.seed, p + "mlp.proj.weight", {h, f}, residual_std));
  fc_proj_b_ = register_parameter("fc_proj_bias", torch::zeros({h}));
  causal_mask_ = register_buffer(
      "causal_mask", torch::ones({options.seq_len, options.seq_len}, torch::kBool).triu(1));
}

torch::Tensor GPTBlockImpl::attention(const torch::Tensor& x) {
  const int64_t b = x.size(0), s = x.size(1), h = options_.hidden_size;
  const int64_t heads = options_.num_heads, d = h / heads;
  auto qkv = torch::linear(x, qkv_w_, qkv_b_).view({b, s, heads, 3, d}).permute({3, 0, 2, 1, 4});
  auto q = qkv[0], k = qkv[1], v = qkv[2];  // [B, heads, S, d]
  auto scores = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(d)));
  scores = scores.masked_fill(causal_mask_.narrow(0, 0, s).narrow(1, 0, s), -std::numeric_limits<float>::infinity());
  auto probs = torch::dropout(torch::softmax(scores, -1), options_.dropout, is_training());
  auto context = torch::matmul(probs, v).transpose(1, 2).reshape({b, s, h});
  return torch::linear(context, proj_w_, proj_b_);
}

torch::Tensor GPTBlockImpl::forward(const torch::Tensor& hidden) {
  auto x = hidden + torch::dropout(attention(layer_norm(hidden, ln1_w_, ln1_b_)), options_.dropout, is_training());
  auto mlp = torch::gelu(torch::linear(layer_norm(x, ln2_w_, ln2_b_), fc_w_, fc_b_), "tanh");
  return x + torch::dropout(torch::linear(mlp, fc_proj_w_, fc_proj_b_), options_.dropout, is_training());
}

std::vector<NamedParameter> GPTBlockImpl::named_parameters_global() const {
  const std::string p = "h." + std::to_string(layer_) + ".";
  return {{p + "ln_1.weight", ln1_w_},      {p + "ln_1.bias", ln1_b_},     {p + "attn.qkv.weight", qkv_w_},
          {p + "attn.qkv.bias", qkv_b_},    {p + "attn.proj.weight", proj_w_}, {p + "attn.proj.bias", proj_b_},
          {p + "ln_2.weight", ln2_w_},      {p + "ln_2.bias", ln2_b_},     {p + "mlp.fc.weight", fc_w_},
          {p + "mlp.fc.bias", fc_b_},       {p + "mlp.proj.weight", fc_proj_w_}, {p + "mlp.proj.bias", fc_proj_b_}};
}

GPTOutputStageImpl::GPTOutputStageImpl(const GPTOptions& options, torch::Tensor word_embedding)
    : options_(options), wte_(std::move(word_embedding)) {
  lnf_w_ = register_parameter("ln_f_weight", torch::ones({options.hidden_size}));
  lnf_b_ = register_parameter("ln_f_bias", torch::zeros({options.hidden_size}));
}

torch::Tensor GPTOutputStageImpl::logits(const torch::Tensor& hidden) {
  return torch::linear(layer_norm(hidden, lnf_w_, lnf_b_), wte_);
}

torch::Tensor GPTOutputStageImpl::forward(const torch::Tensor& hidden, const torch::Tensor& targets) {
  auto l = logits(hidden);
  return torch::cross_entropy_loss(l.view({-1, l.size(-1)}), targets.reshape({-1}));
}

std::vector<NamedParameter> GPTOutputStageImpl::named_parameters_global() const {
  return {{"ln_f.weight", lnf_w_}, {"ln_f.bias", lnf_b_}};
}

GPTImpl::GPTImpl(const GPTOptions& options) : options_(options) {
  input = register_module("input", GPTInputStage(options));
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < options.num_layers; ++i) blocks->push_back(GPTBlock(options, i));
  output = register_module("output", GPTOutputStage(options, input->word_embedding()));
}

torch::Tensor GPTImpl::forward(const torch::Tensor& tokens, const torch::Tensor& targets) {
  auto hidden = input->forward(tokens);
  for (auto& block : *blocks) hidden = block->as<GPTBlock>()->forward(hidden);
  return output->forward(hidden, targets);
}

torch::Tensor GPTImpl::logits(const torch::Tensor& tokens) {
  auto hidden = input->forward(tokens);
  for (auto& block : *blocks) hidden = block->as<GPTBlock>()->forward(hidden);
  return output->logits(hidden);
}

std::vector<NamedParameter> GPTImpl::named_parameters_global() const {
  auto all = input->named_parameters_global();
  for (const auto& block : *blocks) {
    auto more = block->as<GPTBlockImpl>()->named_parameters_global();
    all.insert(all.end(), more.begin(), more.end());
  }
  auto tail = output->named_parameters_global();
  all.insert(all.end(), tail.begin(), tail.end());
  return all;
}

int64_t GPTImpl::num_parameters() const {
  int64_t n = 0;
  for (const auto& p : named_parameters_global()) n += p.tensor.numel();
  return n;
}

}  // namespace loom::models
