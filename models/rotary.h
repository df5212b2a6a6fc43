// Rotary position embeddings (RoPE, Su et al.) in Hugging Face's rotate-half
// layout: feature i of a head and feature i + d/2 form a pair rotated by the
// angle position * inv_freq[i], so a query-key product depends on their
// distance only. Positions are global (a rank holding part of the sequence
// passes its first position), so every layout rotates a token alike.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>

#include "core/config.h"

namespace loom::models {

// The d/2 inverse frequencies theta^(-2i/d), with Llama 3's or YaRN's rescaling when SCALING asks for it.
torch::Tensor rope_inverse_frequencies(int64_t head_dim, double theta, const RopeScalingConfig& scaling);

// YaRN's factor on cos and sin (1 for the other kinds): rope_scaling.attention_factor, or
// (0.1 mscale ln(factor) + 1) / (0.1 mscale_all_dim ln(factor) + 1) with both given, else 0.1 ln(factor) + 1.
double rope_attention_factor(const RopeScalingConfig& scaling);

// Latent attention's factor on its softmax scale under YaRN: (0.1 mscale_all_dim ln(factor) + 1)^2, else 1.
double latent_softmax_scale_factor(const RopeScalingConfig& scaling);

// [x1, x2] -> [-x2, x1] along the last dimension.
torch::Tensor rotate_half(const torch::Tensor& x);

// Copies share their tables: a model builds one and hands it to every layer.
class RotaryEmbedding {
 public:
  RotaryEmbedding() = default;
  // INTERLEAVE: x's features rotate in adjacent pairs (x0, x1), (x2, x3), ... (DeepSeek's
  // layout); the result then holds each pair's first features, then their second ones (as
  // transformers lays it out: a query-key product is the same under any common order).
  RotaryEmbedding(int64_t head_dim, int64_t max_positions, double theta, const RopeScalingConfig& scaling,
                  bool interleave = false);
  // x [B, S, heads, d] whose token s sits at global position FIRST_POSITION + s -> rotated x, in x's dtype.
  torch::Tensor apply(const torch::Tensor& x, int64_t first_position = 0) const;
  // x [B, S, heads, d] whose token s sits at global position POSITIONS[s] (int64 [S]), as context
  // parallelism lays a rank's two chunks of the sequence.
  torch::Tensor apply_at(const torch::Tensor& x, const torch::Tensor& positions) const;
  bool defined() const { return tables_ != nullptr; }

 private:
  // [max_positions, d] cat(angles, angles) in fp32, and the same on the device and in the
  // dtype last asked for: cast once, not twice per layer and micro-batch.
  struct Tables {
    torch::Tensor cos32, sin32, cos, sin;
  };
  Tables& tables_like(const torch::Tensor& x) const;
  torch::Tensor rotate(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) const;
  std::shared_ptr<Tables> tables_;
  bool interleave_ = false;
};

}  // namespace loom::models
