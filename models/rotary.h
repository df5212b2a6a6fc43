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

// The d/2 inverse frequencies theta^(-2i/d), with Llama 3's rescaling when SCALING asks for it.
torch::Tensor rope_inverse_frequencies(int64_t head_dim, double theta, const RopeScalingConfig& scaling);

// [x1, x2] -> [-x2, x1] along the last dimension.
torch::Tensor rotate_half(const torch::Tensor& x);

// Copies share their tables: a model builds one and hands it to every layer.
class RotaryEmbedding {
 public:
  RotaryEmbedding() = default;
  RotaryEmbedding(int64_t head_dim, int64_t max_positions, double theta, const RopeScalingConfig& scaling);
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
  std::shared_ptr<Tables> tables_;
};

}  // namespace loom::models
