#include "models/gpt_flops.h"

#include "models/moe.h"

namespace loom::models {

double gpt_flops_per_token(const Config& config) {
  const auto& m = config.model;
  const double h = static_cast<double>(m.hidden_size), f = static_cast<double>(config.ffn_size());
  const double attention_weights = 4.0 * h * h;  // QKV and the output projection
  const double dense_mlp = 2.0 * h * f;
  double weights = static_cast<double>(m.vocab_size) * h;  // the output layer
  for (int64_t layer = 0; layer < m.num_layers; ++layer) {
    const bool moe = is_moe_layer(m.moe, layer);
    weights += attention_weights;
    weights +=
        moe ? static_cast<double>(m.moe.top_k) * dense_mlp + h * static_cast<double>(m.moe.num_experts) : dense_mlp;
  }
  const double attention = 12.0 * static_cast<double>(m.num_layers) * h * static_cast<double>(m.seq_len);
  return 6.0 * weights + attention;
}

}  // namespace loom::models
