#include "models/rotary.h"

#include <cmath>

namespace loom::models {

torch::Tensor rope_inverse_frequencies(int64_t head_dim, double theta, const RopeScalingConfig& scaling) {
  auto exponents = torch::arange(0, head_dim, 2, torch::kDouble) / static_cast<double>(head_dim);
  auto inv_freq = torch::pow(theta, -exponents);
  if (scaling.type == RopeScalingKind::llama3) {
    const double original = static_cast<double>(scaling.original_max_position_embeddings);
    const double low_wavelen = original / scaling.low_freq_factor;    // longer than this: scaled
    const double high_wavelen = original / scaling.high_freq_factor;  // shorter than this: kept
    auto wavelen = 2.0 * M_PI / inv_freq;
    auto smooth = (original / wavelen - scaling.low_freq_factor) / (scaling.high_freq_factor - scaling.low_freq_factor);
    auto blended = (1.0 - smooth) * inv_freq / scaling.factor + smooth * inv_freq;
    inv_freq = torch::where(wavelen > low_wavelen, inv_freq / scaling.factor,
                            torch::where(wavelen < high_wavelen, inv_freq, blended));
  }
  return inv_freq;
}

torch::Tensor rotate_half(const torch::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

RotaryEmbedding::RotaryEmbedding(int64_t head_dim, int64_t max_positions, double theta,
                                 const RopeScalingConfig& scaling)
    : tables_(std::make_shared<Tables>()) {
  // Angles in fp64, then fp32: position * frequency stays exact to fp32's precision at long contexts.
  auto angles =
      torch::outer(torch::arange(max_positions, torch::kDouble), rope_inverse_frequencies(head_dim, theta, scaling));
  auto both = torch::cat({angles, angles}, -1);
  tables_->cos32 = both.cos().to(torch::kFloat);
  tables_->sin32 = both.sin().to(torch::kFloat);
}

RotaryEmbedding::Tables& RotaryEmbedding::tables_like(const torch::Tensor& x) const {
  auto& t = *tables_;
  if (!t.cos.defined() || t.cos.device() != x.device() || t.cos.scalar_type() != x.scalar_type()) {
    t.cos = t.cos32.to(x.device(), x.scalar_type());
    t.sin = t.sin32.to(x.device(), x.scalar_type());
  }
  return t;
}

torch::Tensor RotaryEmbedding::apply(const torch::Tensor& x, int64_t first_position) const {
  const int64_t s = x.size(1);
  TORCH_CHECK(first_position + s <= tables_->cos32.size(0), "rotary embedding: positions up to ", first_position + s,
              " but only ", tables_->cos32.size(0), " were prepared");
  auto& t = tables_like(x);
  auto cos = t.cos.narrow(0, first_position, s).unsqueeze(1);  // [S, 1, d]
  auto sin = t.sin.narrow(0, first_position, s).unsqueeze(1);
  return x * cos + rotate_half(x) * sin;
}

torch::Tensor RotaryEmbedding::apply_at(const torch::Tensor& x, const torch::Tensor& positions) const {
  auto& t = tables_like(x);
  auto cos = t.cos.index_select(0, positions).unsqueeze(1);  // [S, 1, d]
  auto sin = t.sin.index_select(0, positions).unsqueeze(1);
  return x * cos + rotate_half(x) * sin;
}

}  // namespace loom::models
