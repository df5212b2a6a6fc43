// The shape and options of loom's decoder-only transformer (models/gpt.h): GPT-2 by
// default; Llama-shaped (RMSNorm, SwiGLU, RoPE, grouped-query attention, no biases,
// an untied output layer) from the same options, as Megatron-LM's GPT model is.
#pragma once

#include <torch/torch.h>

#include <cmath>
#include <cstdint>

#include "core/config.h"

namespace loom::models {

struct GPTOptions {
  int64_t vocab_size = 256;
  int64_t seq_len = 64;
  int64_t hidden_size = 64;
  int64_t num_heads = 4;
  int64_t num_kv_heads = 0;        // 0: num_heads
  int64_t attention_head_dim = 0;  // 0: hidden_size / num_heads
  bool qk_norm = false;            // Qwen3's per-head RMSNorm of queries and keys
  int64_t ffn_hidden_size = 256;
  int64_t num_layers = 2;
  NormKind norm = NormKind::layernorm;
  double norm_eps = 1e-5;
  Activation activation = Activation::gelu;
  PositionKind position = PositionKind::learned;
  double rope_theta = 10000.0;
  RopeScalingConfig rope_scaling;
  bool rope_interleave = false;  // DeepSeek's pairs of adjacent features
  MlaConfig mla;                 // kv_lora_rank 0: no latent attention
  MtpConfig mtp;                 // depth 0: no multi-token prediction
  bool bias = true;              // the linear layers'
  bool qkv_bias = true;          // the query, key and value projections'
  bool tie_embeddings = true;
  double dropout = 0.0;
  uint64_t seed = 1234;
  Recompute recompute = Recompute::none;  // full: whole blocks; selective: the attention core
  MoEConfig moe;                          // num_experts 0: dense MLPs
  bool expert_tp = false;                 // each expert's width split over tp (parallel.expert_tp)
  double loss_scale = 1.0;                // the trainer's factor on each micro-batch's loss (MoE auxiliary losses)
  torch::ScalarType activation_dtype = torch::kFloat;  // bf16 under train.precision bf16

  int64_t kv_heads() const { return num_kv_heads > 0 ? num_kv_heads : num_heads; }
  // Each head's query and key width (under latent attention the part without position and the rotated one).
  int64_t head_dim() const {
    if (mla.enabled()) return mla.qk_head_dim();
    return attention_head_dim > 0 ? attention_head_dim : hidden_size / num_heads;
  }
  // The features a head rotates: all of them, or latent attention's rotated part.
  int64_t rotary_dim() const { return mla.enabled() ? mla.qk_rope_head_dim : head_dim(); }

  static GPTOptions from_config(const Config& config);
};

// Whether the last pipeline piece reads the word embedding too: as its output layer (tied), or for
// multi-token prediction's inputs (models/mtp.h); a last piece that is not the first then holds a copy.
inline bool shares_word_embedding(const GPTOptions& o) {
  return o.tie_embeddings || o.mtp.depth > 0;
}

// Megatron-LM's rule for grouped-query attention under tp: with tp above the kv heads
// (tp a multiple of them) each kv head is shared by tp / kv_heads ranks, every rank
// holding the whole key/value projection; otherwise each rank holds kv_heads / tp whole heads.
inline bool kv_heads_shared(int64_t kv_heads, int64_t tp) {
  return tp > kv_heads;
}

// Weights are drawn from N(0, 0.02); the projections that feed the residual stream
// from N(0, 0.02 / sqrt(2 L)), as GPT-2 does.
constexpr double kInitStd = 0.02;
inline double residual_init_std(const GPTOptions& o) {
  return kInitStd / std::sqrt(2.0 * static_cast<double>(o.num_layers));
}

}  // namespace loom::models
