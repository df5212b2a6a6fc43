// GPT with the GPT-2 architecture: token and learned position embeddings,
// pre-LayerNorm blocks of causal multi-head attention and a GELU (tanh) MLP,
// a final LayerNorm, and an output projection tied to the token embedding.
//
// The model is three kinds of pieces so that a pipeline can deal them out:
// GPTInputStage (embeddings), GPTBlock (one transformer layer) and
// GPTOutputStage (final norm, logits and loss).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"

namespace loom::models {

struct GPTOptions {
  int64_t vocab_size = 256;
  int64_t seq_len = 64;
  int64_t hidden_size = 64;
  int64_t num_heads = 4;
  int64_t ffn_hidden_size = 256;
  int64_t num_layers = 2;
  double dropout = 0.0;
  uint64_t seed = 1234;

  static GPTOptions from_config(const Config& config);
};

// A parameter with the global name it is initialised, reported and saved by.
struct NamedParameter {
  std::string name;
  torch::Tensor tensor;
};

class GPTInputStageImpl : public torch::nn::Module {
 public:
  explicit GPTInputStageImpl(const GPTOptions& options);
  // tokens [B, S] int64 -> hidden [B, S, H]
  torch::Tensor forward(const torch::Tensor& tokens);
  const torch::Tensor& word_embedding() const { return wte_; }
  std::vector<NamedParameter> named_parameters_global() const;

 private:
  GPTOptions options_;
  torch::Tensor wte_, wpe_;
};
TORCH_MODULE(GPTInputStage);

class GPTBlockImpl : public torch::nn::Module {
 public:
  GPTBlockImpl(const GPTOptions& options, int64_t layer);
  torch::Tensor forward(const torch::Tensor& hidden);
  std::vector<NamedParameter> named_parameters_global() const;

 private:
  torch::Tensor attention(const torch::Tensor& x);
  GPTOptions options_;
  int64_t layer_;
  torch::Tensor ln1_w_, ln1_b_, qkv_w_, qkv_b_, proj_w_, proj_b_;
  torch::Tensor ln2_w_, ln2_b_, fc_w_, fc_b_, fc_proj_w_, fc_proj_b_;
  torch::Tensor causal_mask_;  // [S, S], true above the diagonal
};
TORCH_MODULE(GPTBlock);

class GPTOutputStageImpl : public torch::nn::Module {
 public:
  // WORD_EMBEDDING is the input stage's weight when both stages live in this
  // process (the tie is then one tensor); it is not registered here.
  GPTOutputStageImpl(const GPTOptions& options, torch::Tensor word_embedding);
  // hidden [B, S, H], targets [B, S] -> mean cross-entropy over B*S tokens
  torch::Tensor forward(const torch::Tensor& hidden, const torch::Tensor& targets);
  torch::Tensor logits(const torch::Tensor& hidden);
  std::vector<NamedParameter> named_parameters_global() const;

 private:
  GPTOptions options_;
  torch::Tensor lnf_w_, lnf_b_;
  torch::Tensor wte_;
};
TORCH_MODULE(GPTOutputStage);

class GPTImpl : public torch::nn::Module {
 public:
  explicit GPTImpl(const GPTOptions& options);
  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& targets);
  torch::Tensor logits(const torch::Tensor& tokens);
  // Every parameter once, with its global name, in order of use in forward.
  std::vector<NamedParameter> named_parameters_global() const;
  int64_t num_parameters() const;

  GPTInputStage input{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  GPTOutputStage output{nullptr};

 private:
  GPTOptions options_;
};
TORCH_MODULE(GPT);

}  // namespace loom::models
