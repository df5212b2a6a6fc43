#include "models/gpt_shapes.h"

#include "models/gpt_options.h"
#include "models/moe.h"

namespace loom::models {
namespace {

int64_t sum_numel(const std::vector<ParameterShape>& shapes) {
  int64_t n = 0;
  for (const auto& s : shapes) n += s.numel();
  return n;
}

// A norm: weight, and a bias for LayerNorm. Under sequence parallelism it sees a slice of the sequence.
void add_norm(std::vector<ParameterShape>& out, const Config& c, const std::string& name) {
  const int64_t h = c.model.hidden_size;
  const bool sp = c.parallel.sequence_parallel;
  out.push_back({name + ".weight", {h}, -1, sp});
  if (c.model.norm == NormKind::layernorm) out.push_back({name + ".bias", {h}, -1, sp});
}

// A column-parallel linear layer [OUT, IN]: weight and bias split along the outputs.
void add_column(std::vector<ParameterShape>& out, const std::string& name, int64_t out_features, int64_t in_features,
                bool bias) {
  out.push_back({name + ".weight", {out_features, in_features}, 0, false});
  if (bias) out.push_back({name + ".bias", {out_features}, 0, false});
}

// A row-parallel linear layer: weight split along the inputs, its bias whole (added
// after the reduction, so under sequence parallelism to a slice of the sequence).
void add_row(std::vector<ParameterShape>& out, const Config& c, const std::string& name, int64_t out_features,
             int64_t in_features) {
  out.push_back({name + ".weight", {out_features, in_features}, 1, false});
  if (c.model.bias) out.push_back({name + ".bias", {out_features}, -1, c.parallel.sequence_parallel});
}

// ln_1, the attention's projections and ln_2: the block but its MLP.
std::vector<ParameterShape> attention_and_norms(const Config& c, const std::string& p) {
  const auto& m = c.model;
  const int64_t h = m.hidden_size, d = m.head_dim(), heads = m.num_heads, kv = m.kv_heads();
  std::vector<ParameterShape> out;
  add_norm(out, c, p + "ln_1");
  if (m.mla.enabled()) {
    // Latent attention (models/latent_attention.h): the down projections and the latents' norms
    // replicated over tp, each rank's heads feeding their gradients.
    const auto& a = m.mla;
    const bool summed = c.parallel.tp > 1;
    if (a.q_lora_rank > 0) {
      out.push_back({p + "attn.q_a.weight", {a.q_lora_rank, h}, -1, summed});
      out.push_back({p + "attn.q_a_norm.weight", {a.q_lora_rank}, -1, summed});
      add_column(out, p + "attn.q_b", heads * a.qk_head_dim(), a.q_lora_rank, false);
    } else {
      add_column(out, p + "attn.q", heads * a.qk_head_dim(), h, false);
    }
    out.push_back({p + "attn.kv_a.weight", {a.kv_lora_rank + a.qk_rope_head_dim, h}, -1, summed});
    out.push_back({p + "attn.kv_a_norm.weight", {a.kv_lora_rank}, -1, summed});
    add_column(out, p + "attn.kv_b", heads * (a.qk_nope_head_dim + a.v_head_dim), a.kv_lora_rank, false);
    add_row(out, c, p + "attn.proj", h, heads * a.v_head_dim);
    add_norm(out, c, p + "ln_2");
    return out;
  }
  if (kv == heads) {
    add_column(out, p + "attn.qkv", 3 * heads * d, h, m.qkv_bias);
  } else {
    add_column(out, p + "attn.q", heads * d, h, m.qkv_bias);
    if (kv_replicated(c)) {
      // Every tp rank holds all kv heads and uses its own; the partial gradients are summed over tp.
      out.push_back({p + "attn.kv.weight", {2 * kv * d, h}, -1, true});
      if (m.qkv_bias) out.push_back({p + "attn.kv.bias", {2 * kv * d}, -1, true});
    } else {
      add_column(out, p + "attn.kv", 2 * kv * d, h, m.qkv_bias);
    }
  }
  if (m.qk_norm) {  // one weight of head_dim each, every tp rank's heads feeding its gradient
    out.push_back({p + "attn.q_norm.weight", {d}, -1, c.parallel.tp > 1});
    out.push_back({p + "attn.k_norm.weight", {d}, -1, c.parallel.tp > 1});
  }
  add_row(out, c, p + "attn.proj", h, heads * d);
  add_norm(out, c, p + "ln_2");
  return out;
}

std::vector<ParameterShape> mlp_part(const Config& c, const std::string& p) {
  const int64_t h = c.model.hidden_size, f = c.ffn_size();
  std::vector<ParameterShape> out;
  if (c.model.activation == Activation::swiglu) {
    add_column(out, p + "mlp.gate", f, h, c.model.bias);
    add_column(out, p + "mlp.up", f, h, c.model.bias);
  } else {
    add_column(out, p + "mlp.fc", f, h, c.model.bias);
  }
  add_row(out, c, p + "mlp.proj", h, f);
  return out;
}

// Multi-token prediction's modules (models/mtp.h), in order of use: each one's norms, its projection
// (replicated over tp) and, WITH_BLOCKS, its block as a dense block (layer num_layers + k).
std::vector<ParameterShape> mtp_parameters(const Config& c, bool with_blocks) {
  std::vector<ParameterShape> out;
  const int64_t h = c.model.hidden_size;
  for (int64_t k = 0; k < c.model.mtp.depth; ++k) {
    const std::string p = "mtp." + std::to_string(k) + ".";
    add_norm(out, c, p + "enorm");
    add_norm(out, c, p + "hnorm");
    out.push_back({p + "eh_proj.weight", {h, 2 * h}, -1, c.parallel.sequence_parallel});
    if (with_blocks) {
      const std::string b = "h." + std::to_string(c.model.num_layers + k) + ".";
      for (auto& s : attention_and_norms(c, b)) out.push_back(std::move(s));
      for (auto& s : mlp_part(c, b)) out.push_back(std::move(s));
    }
    add_norm(out, c, p + "norm");
  }
  return out;
}

}  // namespace

int64_t ParameterShape::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

int64_t ParameterShape::local_numel(int64_t tp) const {
  if (tp_split_dim < 0) return numel();
  const auto dim = static_cast<size_t>(tp_split_dim);
  return numel() / shape[dim] * ((shape[dim] + tp - 1) / tp);
}

bool kv_replicated(const Config& c) {
  return kv_heads_shared(c.model.kv_heads(), c.parallel.tp);
}

std::vector<ParameterShape> gpt_input_parameters(const Config& c) {
  const auto& m = c.model;
  std::vector<ParameterShape> out{{"wte", {m.vocab_size, m.hidden_size}, 0, false}};
  if (m.position == PositionKind::learned)
    out.push_back({"wpe", {m.seq_len, m.hidden_size}, -1, c.parallel.sequence_parallel});
  return out;
}

std::vector<ParameterShape> gpt_block_parameters(const Config& c, int64_t layer) {
  const std::string p = "h." + std::to_string(layer) + ".";
  auto out = attention_and_norms(c, p);
  for (auto& s : mlp_part(c, p)) out.push_back(std::move(s));
  return out;
}

std::vector<ParameterShape> gpt_output_parameters(const Config& c) {
  std::vector<ParameterShape> out;
  add_norm(out, c, "ln_f");
  if (!c.model.tie_embeddings) out.push_back({"lm_head", {c.model.vocab_size, c.model.hidden_size}, 0, false});
  for (auto& s : mtp_parameters(c, true)) out.push_back(std::move(s));
  return out;
}

int64_t model_num_parameters(const Config& c) {
  const auto& m = c.model;
  const int64_t h = m.hidden_size;
  // Every block has block 0's attention; an MoE block has a router, num_experts expert MLPs and
  // the shared experts (models/moe.h) instead of the dense MLP.
  const int64_t attention = sum_numel(attention_and_norms(c, "h.0.")), mlp = sum_numel(mlp_part(c, "h.0."));
  const int64_t experts = m.moe.num_experts * (h + moe_expert_numel(c)) + moe_shared_numel(c);
  int64_t n = sum_numel(gpt_input_parameters(c)) + sum_numel(gpt_output_parameters(c)) -
              sum_numel(mtp_parameters(c, true)) + sum_numel(mtp_parameters(c, false));
  // The multi-token prediction modules' blocks follow the main ones (layers num_layers, ...).
  for (int64_t layer = 0; layer < m.num_layers + m.mtp.depth; ++layer)
    n += attention + (is_moe_layer(m.moe, layer) ? experts : mlp);
  return n;
}

int64_t mtp_num_parameters(const Config& c) {
  Config main = c;
  main.model.mtp.depth = 0;
  return model_num_parameters(c) - model_num_parameters(main);
}

int64_t activated_parameters_per_token(const Config& c) {
  const auto& moe = c.model.moe;
  int64_t idle = 0;
  for (int64_t layer = 0; layer < c.model.num_layers; ++layer)
    if (is_moe_layer(moe, layer)) idle += (moe.num_experts - moe.top_k) * moe_expert_numel(c);
  return model_num_parameters(c) - mtp_num_parameters(c) - idle;
}

int64_t moe_expert_numel(const Config& c) {
  const int64_t h = c.model.hidden_size, f = c.moe_ffn_size();
  if (c.model.activation == Activation::gelu) return 2 * h * f + f + h;
  return 3 * h * f + (c.model.bias ? 2 * f + h : 0);
}

int64_t moe_shared_numel(const Config& c) {
  const int64_t h = c.model.hidden_size, f = c.model.moe.n_shared_experts * c.moe_ffn_size();
  if (f == 0) return 0;
  const int64_t matrices = (c.model.activation == Activation::gelu ? 2 : 3) * h * f;
  const int64_t biases = c.model.bias ? (c.model.activation == Activation::gelu ? f : 2 * f) + h : 0;
  return matrices + biases;
}

}  // namespace loom::models
