#include "models/gpt_flops.h"

#include "models/moe.h"

namespace loom::models {

double gpt_flops_per_token(const Config& config) {
  const auto& m = config.model;
  const double h = static_cast<double>(m.hidden_size), f = static_cast<double>(config.ffn_size());
  const double d = static_cast<double>(m.head_dim()), heads = static_cast<double>(m.num_heads);
  const double kv = static_cast<double>(m.kv_heads());
  // The queries and the output projection (heads x d each way), the keys and values (kv_heads x d each):
  // 4 h^2 with as many kv heads as heads.
  double attention_weights = 2.0 * heads * d * h + 2.0 * kv * d * h;
  // Scores use each head's query and key width, the weighted sum its value width.
  double score_and_sum_width = 2.0 * d;
  if (m.mla.enabled()) {
    const auto& a = m.mla;
    const double q_rank = static_cast<double>(a.q_lora_rank), kv_rank = static_cast<double>(a.kv_lora_rank);
    const double qk = static_cast<double>(a.qk_head_dim()), v = static_cast<double>(a.v_head_dim);
    const double queries = a.q_lora_rank > 0 ? h * q_rank + q_rank * heads * qk : h * heads * qk;
    attention_weights = queries + h * (kv_rank + static_cast<double>(a.qk_rope_head_dim)) +
                        kv_rank * heads * (static_cast<double>(a.qk_nope_head_dim) + v) + heads * v * h;
    score_and_sum_width = qk + v;
  }
  // GELU: fc and proj; SwiGLU: gate, up and proj.
  const double dense_mlp = (m.activation == Activation::swiglu ? 3.0 : 2.0) * h * f;
  // An MoE block: the top_k routed experts each token passes through, the shared experts and the
  // router (the activated parameters, not all experts).
  const double expert_f = static_cast<double>(config.moe_ffn_size());
  const double expert_mlp = (m.activation == Activation::swiglu ? 3.0 : 2.0) * h * expert_f;
  const double moe_mlp = static_cast<double>(m.moe.top_k) * expert_mlp +
                         static_cast<double>(m.moe.n_shared_experts) * expert_mlp +
                         h * static_cast<double>(m.moe.num_experts);
  // The output layer, tied or not, once for the model and once for each multi-token prediction
  // module, which also has its eh_proj (2h -> h) and one block (layer num_layers + k - 1, an MoE
  // block where the model's rule says so), as Megatron-LM counts its MTP layers.
  const double depth = static_cast<double>(m.mtp.depth);
  double weights = (1.0 + depth) * static_cast<double>(m.vocab_size) * h + depth * 2.0 * h * h;
  const int64_t blocks = m.num_layers + m.mtp.depth;
  for (int64_t layer = 0; layer < blocks; ++layer) {
    const bool moe = is_moe_layer(m.moe, layer);
    weights += attention_weights;
    weights += moe ? moe_mlp : dense_mlp;
  }
  // Scores and the weighted sum use every query head (heads x d, h unless model.head_dim says
  // otherwise), however few kv heads there are.
  const double attention =
      6.0 * static_cast<double>(blocks) * heads * score_and_sum_width * static_cast<double>(m.seq_len);
  return 6.0 * weights + attention;
}

}  // namespace loom::models
