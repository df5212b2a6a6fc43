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
                                 const RopeScalingConfig& scaling) {
  // Angles in fp64, then fp32: position * frequency stays exact to fp32's precision at long contexts.
  auto angles =
      torch::outer(torch::arange(max_positions, torch::kDouble), rope_inverse_frequencies(head_dim, theta, scaling));
  auto both = torch::cat({angles, angles}, -1);
  cos_ = both.cos().to(torch::kFloat);
  sin_ = both.sin().to(torch::kFloat);
}

torch::Tensor RotaryEmbedding::apply(const torch::Tensor& x, int64_t first_position) const {
  const int64_t s = x.size(1);
  TORCH_CHECK(first_position + s <= cos_.size(0), "rotary embedding: positions up to ", first_position + s,
              " but only ", cos_.size(0), " were prepared");
  auto cos = cos_.narrow(0, first_position, s).to(x.device(), x.scalar_type()).unsqueeze(1);  // [S, 1, d]
  auto sin = sin_.narrow(0, first_position, s).to(x.device(), x.scalar_type()).unsqueeze(1);
  return x * cos + rotate_half(x) * sin;
}

}  // namespace loom::models
