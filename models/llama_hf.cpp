#include "models/llama_hf.h"

#include <map>

namespace loom::models {

namespace {

// DeepSeek's latent attention (models/latent_attention.h) in its release's names: the same
// tensors, no permutation (q_b, q and kv_b rows are head by head in both).
void add_latent_attention(std::vector<LlamaTensor>& out, const Config& config, const std::string& h,
                          const std::string& hf) {
  const auto& m = config.model;
  const auto& a = m.mla;
  const int64_t H = m.hidden_size, heads = m.num_heads;
  auto same = [&](const std::string& loom, const std::string& theirs, std::vector<int64_t> shape) {
    out.push_back({h + "attn." + loom, {{hf + "self_attn." + theirs, std::move(shape)}}});
  };
  if (a.q_lora_rank > 0) {
    same("q_a.weight", "q_a_proj.weight", {a.q_lora_rank, H});
    same("q_a_norm.weight", "q_a_layernorm.weight", {a.q_lora_rank});
    same("q_b.weight", "q_b_proj.weight", {heads * a.qk_head_dim(), a.q_lora_rank});
  } else {
    same("q.weight", "q_proj.weight", {heads * a.qk_head_dim(), H});
  }
  same("kv_a.weight", "kv_a_proj_with_mqa.weight", {a.kv_lora_rank + a.qk_rope_head_dim, H});
  same("kv_a_norm.weight", "kv_a_layernorm.weight", {a.kv_lora_rank});
  same("kv_b.weight", "kv_b_proj.weight", {heads * (a.qk_nope_head_dim + a.v_head_dim), a.kv_lora_rank});
}

}  // namespace

std::vector<LlamaTensor> llama_tensors(const Config& config) {
  const auto& m = config.model;
  const int64_t H = m.hidden_size, heads = m.num_heads, kv = m.kv_heads(), d = m.head_dim(), F = config.ffn_size(),
                V = m.vocab_size;
  std::vector<LlamaTensor> out{{"wte", {{"model.embed_tokens.weight", {V, H}}}}};
  auto same = [&](const std::string& loom, const std::string& hf, std::vector<int64_t> shape) {
    out.push_back({loom, {{hf, std::move(shape)}}});
  };
  // DeepSeek-V3's multi-token prediction modules are the layers after the main ones.
  const int64_t layers = m.num_layers + (m.mla.enabled() ? m.mtp.depth : 0);
  for (int64_t i = 0; i < layers; ++i) {
    const std::string h = "h." + std::to_string(i) + ".", hf = "model.layers." + std::to_string(i) + ".";
    const std::string q = hf + "self_attn.q_proj.", k = hf + "self_attn.k_proj.", v = hf + "self_attn.v_proj.";
    if (m.mla.enabled()) add_latent_attention(out, config, h, hf);
    for (const std::string kind : {"weight", "bias"}) {
      if (m.mla.enabled()) break;
      if (kind == "bias" && !m.qkv_bias) continue;
      auto shape = [&](int64_t rows) { return kind == "weight" ? std::vector<int64_t>{rows, H} : std::vector{rows}; };
      if (kv == heads) {
        out.push_back({h + "attn.qkv." + kind,
                       {{q + kind, shape(heads * d)}, {k + kind, shape(heads * d)}, {v + kind, shape(heads * d)}},
                       heads});
      } else {
        same(h + "attn.q." + kind, q + kind, shape(heads * d));
        out.push_back({h + "attn.kv." + kind, {{k + kind, shape(kv * d)}, {v + kind, shape(kv * d)}}, kv});
      }
    }
    same(h + "attn.proj.weight", hf + "self_attn.o_proj.weight", {H, heads * (m.mla.enabled() ? m.mla.v_head_dim : d)});
    if (m.bias) same(h + "attn.proj.bias", hf + "self_attn.o_proj.bias", {H});
    if (m.qk_norm) {  // Qwen3
      same(h + "attn.q_norm.weight", hf + "self_attn.q_norm.weight", {d});
      same(h + "attn.k_norm.weight", hf + "self_attn.k_norm.weight", {d});
    }
    if (moe_block(m.moe, i)) {
      // Mixtral's names: the router is block_sparse_moe.gate, expert N's gate, proj and up w1, w2,
      // w3; Qwen3-MoE's (the MoE with q/k norms): mlp.gate, mlp.experts.N.gate_proj, up_proj, down_proj.
      // DeepSeek-V3's (the MoE with latent attention): Qwen3-MoE's, with mlp.gate.e_score_correction_bias
      // (the expert bias, held by the trainer, not a parameter) and mlp.shared_experts.
      const bool qwen3 = m.qk_norm || m.mla.enabled();
      const std::string moe = hf + (qwen3 ? "mlp." : "block_sparse_moe.");
      const int64_t expert_f = config.moe_ffn_size();
      same(h + "moe.router.weight", moe + "gate.weight", {m.moe.num_experts, H});
      if (m.mla.enabled()) {
        same(h + "moe.expert_bias", moe + "gate.e_score_correction_bias", {m.moe.num_experts});
        const int64_t shared_f = m.moe.n_shared_experts * expert_f;
        for (const auto& [loom, name, rows, cols] :
             {std::tuple{"gate", "gate_proj", shared_f, H}, std::tuple{"up", "up_proj", shared_f, H},
              std::tuple{"proj", "down_proj", H, shared_f}}) {
          if (shared_f == 0) break;
          same(h + "moe.shared_experts." + loom + ".weight", moe + "shared_experts." + name + ".weight", {rows, cols});
        }
      }
      for (int64_t e = 0; e < m.moe.num_experts; ++e) {
        const std::string loom = h + "moe.experts." + std::to_string(e) + ".",
                          theirs = moe + "experts." + std::to_string(e) + ".";
        same(loom + "gate.weight", theirs + (qwen3 ? "gate_proj.weight" : "w1.weight"), {expert_f, H});
        same(loom + "up.weight", theirs + (qwen3 ? "up_proj.weight" : "w3.weight"), {expert_f, H});
        same(loom + "proj.weight", theirs + (qwen3 ? "down_proj.weight" : "w2.weight"), {H, expert_f});
      }
    } else {
      for (const auto& [loom, name, rows, cols] :
           {std::tuple{"gate", "gate_proj", F, H}, std::tuple{"up", "up_proj", F, H},
            std::tuple{"proj", "down_proj", H, F}}) {
        same(h + "mlp." + loom + ".weight", hf + "mlp." + name + ".weight", {rows, cols});
        if (m.bias) same(h + "mlp." + loom + ".bias", hf + "mlp." + name + ".bias", {rows});
      }
    }
    same(h + "ln_1.weight", hf + "input_layernorm.weight", {H});
    same(h + "ln_2.weight", hf + "post_attention_layernorm.weight", {H});
    if (i >= m.num_layers) {
      // Module k's own norms and projection, and the copies of the word embedding and output layer
      // the release stores beside them (loom's modules share the main ones: read from model.*).
      const std::string mtp = "mtp." + std::to_string(i - m.num_layers) + ".";
      same(mtp + "enorm.weight", hf + "enorm.weight", {H});
      same(mtp + "hnorm.weight", hf + "hnorm.weight", {H});
      same(mtp + "eh_proj.weight", hf + "eh_proj.weight", {H, 2 * H});
      same(mtp + "norm.weight", hf + "shared_head.norm.weight", {H});
      out.push_back({"wte", {{hf + "embed_tokens.weight", {V, H}}}, 0, /*copy=*/true});
      out.push_back({m.tie_embeddings ? "wte" : "lm_head", {{hf + "shared_head.head.weight", {V, H}}}, 0, true});
    }
  }
  same("ln_f.weight", "model.norm.weight", {H});
  if (!m.tie_embeddings) same("lm_head", "lm_head.weight", {V, H});
  return out;
}

std::vector<std::pair<std::string, torch::Tensor>> llama_to_hf(const std::map<std::string, torch::Tensor>& loom,
                                                               const Config& config) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& t : llama_tensors(config)) {
    auto it = loom.find(t.loom);
    TORCH_CHECK(it != loom.end(), "Llama tensor ", t.loom, " is missing");
    const auto& whole = it->second;
    if (t.groups == 0) {
      out.emplace_back(t.hf[0].name, whole.contiguous());
      continue;
    }
    const int64_t parts = static_cast<int64_t>(t.hf.size());
    auto shape = whole.sizes().vec();
    shape[0] /= t.groups * parts;
    shape.insert(shape.begin(), {t.groups, parts});
    const auto split = whole.reshape(shape);
    for (int64_t p = 0; p < parts; ++p) {
      out.emplace_back(t.hf[static_cast<size_t>(p)].name,
                       split.select(1, p).reshape(t.hf[static_cast<size_t>(p)].shape).contiguous());
    }
  }
  // transformers' DeepSeek-V3 has shared experts even when n_shared_experts is 0: tensors of no rows
  // or columns, which from_pretrained would otherwise list as missing.
  const auto& m = config.model;
  if (m.mla.enabled() && m.moe.enabled() && m.moe.n_shared_experts == 0) {
    const int64_t H = m.hidden_size;
    for (int64_t i = 0; i < m.num_layers + m.mtp.depth; ++i) {
      if (!moe_block(m.moe, i)) continue;
      const std::string shared = "model.layers." + std::to_string(i) + ".mlp.shared_experts.";
      out.emplace_back(shared + "gate_proj.weight", torch::zeros({0, H}));
      out.emplace_back(shared + "up_proj.weight", torch::zeros({0, H}));
      out.emplace_back(shared + "down_proj.weight", torch::zeros({H, 0}));
    }
  }
  return out;
}

namespace {

// T joined from its Hugging Face parts.
torch::Tensor join_from_hf(const LlamaTensor& t, const HfTensorReader& read) {
  if (t.groups == 0) return read(t.hf[0].name, t.hf[0].shape);
  std::vector<torch::Tensor> parts;
  for (const auto& part : t.hf) {
    auto rows = read(part.name, part.shape);
    auto shape = rows.sizes().vec();
    shape[0] /= t.groups;
    shape.insert(shape.begin(), t.groups);
    parts.push_back(rows.reshape(shape));
  }
  auto joined = torch::stack(parts, 1);  // [groups, parts, d, ...]
  auto shape = joined.sizes().vec();
  shape.erase(shape.begin(), shape.begin() + 2);
  shape[0] *= t.groups * static_cast<int64_t>(t.hf.size());
  return joined.reshape(shape).contiguous();
}

}  // namespace

std::optional<torch::Tensor> llama_from_hf(const std::string& name, const HfTensorReader& read, const Config& config) {
  return LlamaHfLoader(read, config)(name);
}

LlamaHfLoader::LlamaHfLoader(HfTensorReader read, const Config& config) : read_(std::move(read)) {
  for (auto& t : llama_tensors(config)) {
    if (t.copy) continue;
    auto name = t.loom;
    index_.emplace(std::move(name), std::move(t));
  }
}

std::optional<torch::Tensor> LlamaHfLoader::operator()(const std::string& name) const {
  const auto it = index_.find(name);
  if (it == index_.end()) return std::nullopt;
  return join_from_hf(it->second, read_);
}

}  // namespace loom::models
