// The config.json `loom export` writes for a model: GPT-2, the Llama family (Llama, Qwen2) and
// the MoE classes loom reads (Mixtral, Qwen3, Qwen3-MoE), each refusing what it cannot hold.
#include <string>

#include "core/errors.h"
#include "core/hf_config.h"

namespace loom {
namespace {

// The rotary scaling of CONFIG as config.json's rope_scaling (null: none).
nlohmann::json rope_scaling_json(const Config& config) {
  const auto& s = config.model.rope_scaling;
  if (s.type == RopeScalingKind::yarn) {
    nlohmann::json yarn = {{"rope_type", "yarn"},
                           {"factor", s.factor},
                           {"original_max_position_embeddings", s.original_max_position_embeddings},
                           {"beta_fast", s.beta_fast},
                           {"beta_slow", s.beta_slow}};
    // 0 is loom's "absent" (derived), as a missing field is transformers'.
    for (const auto& [key, value] : {std::pair{"mscale", s.mscale},
                                     {"mscale_all_dim", s.mscale_all_dim},
                                     {"attention_factor", s.attention_factor}})
      if (value > 0) yarn[key] = value;
    return yarn;
  }
  if (s.type != RopeScalingKind::llama3) return nullptr;
  nlohmann::json llama3 = {{"rope_type", "llama3"},
                           {"factor", s.factor},
                           {"low_freq_factor", s.low_freq_factor},
                           {"high_freq_factor", s.high_freq_factor},
                           {"original_max_position_embeddings", s.original_max_position_embeddings}};
  if (s.mscale_all_dim > 0) llama3["mscale_all_dim"] = s.mscale_all_dim;  // latent attention's softmax scale
  return llama3;
}

// The fields every Llama-family config.json starts with, in transformers' order.
nlohmann::ordered_json llama_family_json(const Config& config, const std::string& architecture,
                                         const std::string& model_type, int64_t intermediate_size) {
  const auto& m = config.model;
  return {{"architectures", {architecture}},
          {"model_type", model_type},
          {"hidden_size", m.hidden_size},
          {"intermediate_size", intermediate_size},
          {"num_hidden_layers", m.num_layers},
          {"num_attention_heads", m.num_heads},
          {"num_key_value_heads", m.kv_heads()},
          {"head_dim", m.head_dim()},
          {"vocab_size", m.vocab_size},
          {"max_position_embeddings", m.seq_len},
          {"rms_norm_eps", m.norm_eps},
          {"rope_theta", m.rope_theta},
          {"rope_scaling", rope_scaling_json(config)},
          {"hidden_act", "silu"}};
}

// ... and ends with.
void finish_llama_family_json(nlohmann::ordered_json& json, const Config& config) {
  json["attention_dropout"] = 0.0;
  json["tie_word_embeddings"] = config.model.tie_embeddings;
  json["use_cache"] = true;
  json["torch_dtype"] = "float32";
}

// MixtralForCausalLM's config.json for CONFIG, a Llama-shaped MoE checked by the caller; REFUSE
// names what Mixtral cannot hold: its routing is softmax, top-k renormalised, unscaled, in every
// block, over experts of the MLP's width without biases, none shared.
template <typename Refuse>
nlohmann::ordered_json mixtral_config_of(const Config& config, const Refuse& refuse) {
  const auto& m = config.model;
  const auto& moe = m.moe;
  if (m.bias || m.qkv_bias) throw refuse(m.bias ? "bias" : "qkv_bias", "true", "Mixtral has no biases");
  if (moe.score != "softmax") throw refuse("moe.score", moe.score, "Mixtral's router is a softmax");
  if (!moe.norm_topk_prob || moe.routed_scaling_factor != 1.0)
    throw refuse("moe.norm_topk_prob", moe.norm_topk_prob ? "true (scaled)" : "false",
                 "Mixtral renormalises the chosen experts' weights, unscaled");
  if (moe.top_k == 1)
    throw refuse("moe.top_k", "1", "Mixtral would weight the one expert by 1, where loom weights it by its score");
  if (moe.n_group > 1) throw refuse("moe.n_group", std::to_string(moe.n_group), "Mixtral has no group-limited routing");
  if (moe.bias_update_rate > 0)
    throw refuse("moe.bias_update_rate", nlohmann::json(moe.bias_update_rate).dump(), "Mixtral has no expert bias");
  if (moe.n_shared_experts > 0)
    throw refuse("moe.n_shared_experts", std::to_string(moe.n_shared_experts), "Mixtral has no shared experts");
  for (int64_t layer = 0; layer < m.num_layers; ++layer) {
    if (moe_block(moe, layer)) continue;
    const std::string why = "block " + std::to_string(layer) + " is dense, and every Mixtral block has experts";
    if (layer < moe.first_k_dense_replace)
      throw refuse("moe.first_k_dense_replace", std::to_string(moe.first_k_dense_replace), why);
    if (moe.every != 1) throw refuse("moe.every", std::to_string(moe.every), why);
    if (moe.decoder_sparse_step != 1)
      throw refuse("moe.decoder_sparse_step", std::to_string(moe.decoder_sparse_step), why);
    throw refuse("moe.mlp_only_layers", std::to_string(layer), why);
  }
  if (config.moe_ffn_size() != config.ffn_size())
    throw refuse("moe.moe_intermediate_size", std::to_string(moe.moe_intermediate_size),
                 "Mixtral's experts have intermediate_size, the one MLP width");
  auto json = llama_family_json(config, "MixtralForCausalLM", "mixtral", config.moe_ffn_size());
  json["num_local_experts"] = moe.num_experts;
  json["num_experts_per_tok"] = moe.top_k;
  json["router_aux_loss_coef"] = moe.aux_loss_coeff;
  json["output_router_logits"] = false;
  json["sliding_window"] = nullptr;
  finish_llama_family_json(json, config);
  return json;
}

// Qwen3ForCausalLM's config.json, or Qwen3MoeForCausalLM's for an MoE: a Llama with q/k norms
// (model.qk_norm), no biases; the MoE's routing softmax, renormalised or not, unscaled, over
// experts without biases, none shared, the dense blocks those decoder_sparse_step and
// mlp_only_layers name.
template <typename Refuse>
nlohmann::ordered_json qwen3_config_of(const Config& config, const Refuse& refuse) {
  const auto& m = config.model;
  const auto& moe = m.moe;
  if (m.bias || m.qkv_bias)
    throw refuse(m.bias ? "bias" : "qkv_bias", "true", "Qwen3's linear layers have no biases here");
  const bool sparse = moe.enabled();
  if (sparse) {
    if (moe.score != "softmax") throw refuse("moe.score", moe.score, "Qwen3-MoE's router is a softmax");
    if (moe.routed_scaling_factor != 1.0)
      throw refuse("moe.routed_scaling_factor", nlohmann::json(moe.routed_scaling_factor).dump(),
                   "Qwen3-MoE does not scale the routed output");
    if (moe.top_k == 1 && moe.norm_topk_prob)
      throw refuse(
          "moe.top_k", "1",
          "with norm_topk_prob Qwen3-MoE would weight the one expert by 1, where loom weights it by its score");
    if (moe.n_group > 1)
      throw refuse("moe.n_group", std::to_string(moe.n_group), "Qwen3-MoE has no group-limited routing");
    if (moe.bias_update_rate > 0)
      throw refuse("moe.bias_update_rate", nlohmann::json(moe.bias_update_rate).dump(), "Qwen3-MoE has no expert bias");
    if (moe.n_shared_experts > 0)
      throw refuse("moe.n_shared_experts", std::to_string(moe.n_shared_experts), "Qwen3-MoE has no shared experts");
    if (moe.first_k_dense_replace > 0 || moe.every != 1)
      throw refuse(moe.every != 1 ? "moe.every" : "moe.first_k_dense_replace",
                   std::to_string(moe.every != 1 ? moe.every : moe.first_k_dense_replace),
                   "Qwen3-MoE picks its dense blocks by decoder_sparse_step and mlp_only_layers");
  }
  auto json = llama_family_json(config, sparse ? "Qwen3MoeForCausalLM" : "Qwen3ForCausalLM",
                                sparse ? "qwen3_moe" : "qwen3", config.ffn_size());
  json["attention_bias"] = false;
  json["use_sliding_window"] = false;
  json["sliding_window"] = nullptr;
  json["max_window_layers"] = m.num_layers;
  if (sparse) {
    json["num_experts"] = moe.num_experts;
    json["num_experts_per_tok"] = moe.top_k;
    json["moe_intermediate_size"] = config.moe_ffn_size();
    json["norm_topk_prob"] = moe.norm_topk_prob;
    json["decoder_sparse_step"] = moe.decoder_sparse_step;
    json["mlp_only_layers"] = moe.mlp_only_layers;
    json["router_aux_loss_coef"] = moe.aux_loss_coeff;
    json["output_router_logits"] = false;
  }
  finish_llama_family_json(json, config);
  return json;
}

// DeepseekV3ForCausalLM's config.json: latent attention, a sigmoid router choosing by groups with
// a fixed or moving expert bias, shared experts, the first blocks dense and the rest sparse.
template <typename Refuse>
nlohmann::ordered_json deepseek_v3_config_of(const Config& config, const Refuse& refuse) {
  const auto& m = config.model;
  const auto& moe = m.moe;
  const auto& a = m.mla;
  if (m.bias || m.qkv_bias)
    throw refuse(m.bias ? "bias" : "qkv_bias", "true", "DeepSeek-V3's linear layers have no biases");
  if (!moe.enabled())
    throw refuse("moe.num_experts", "0", "DeepSeek-V3's blocks after first_k_dense_replace have experts");
  if (moe.score != "sigmoid") throw refuse("moe.score", moe.score, "DeepSeek-V3's router is a sigmoid");
  if (moe.top_k == 1 && moe.norm_topk_prob)
    throw refuse(
        "moe.top_k", "1",
        "with norm_topk_prob DeepSeek-V3 would weight the one expert by 1, where loom weights it by its score");
  for (int64_t layer = moe.first_k_dense_replace; layer < m.num_layers; ++layer) {
    if (moe_block(moe, layer)) continue;
    const std::string why = "block " + std::to_string(layer) + " is dense, and DeepSeek-V3's blocks after " +
                            "first_k_dense_replace all have experts";
    if (moe.every != 1) throw refuse("moe.every", std::to_string(moe.every), why);
    if (moe.decoder_sparse_step != 1)
      throw refuse("moe.decoder_sparse_step", std::to_string(moe.decoder_sparse_step), why);
    throw refuse("moe.mlp_only_layers", std::to_string(layer), why);
  }
  auto json = llama_family_json(config, "DeepseekV3ForCausalLM", "deepseek_v3", config.ffn_size());
  json["head_dim"] = a.qk_rope_head_dim;  // transformers' name for the rotated width
  json["moe_intermediate_size"] = config.moe_ffn_size();
  json["n_routed_experts"] = moe.num_experts;
  json["n_shared_experts"] = moe.n_shared_experts;
  json["num_experts_per_tok"] = moe.top_k;
  json["routed_scaling_factor"] = moe.routed_scaling_factor;
  json["n_group"] = moe.n_group;
  json["topk_group"] = moe.topk_group;
  json["norm_topk_prob"] = moe.norm_topk_prob;
  json["first_k_dense_replace"] = moe.first_k_dense_replace;
  json["q_lora_rank"] = a.q_lora_rank > 0 ? nlohmann::ordered_json(a.q_lora_rank) : nlohmann::ordered_json();
  json["kv_lora_rank"] = a.kv_lora_rank;
  json["qk_nope_head_dim"] = a.qk_nope_head_dim;
  json["qk_rope_head_dim"] = a.qk_rope_head_dim;
  json["v_head_dim"] = a.v_head_dim;
  json["rope_interleave"] = m.rope_interleave;
  json["attention_bias"] = false;
  json["num_nextn_predict_layers"] = m.mtp.depth;  // the layers after the main ones (models/llama_hf.h)
  finish_llama_family_json(json, config);
  return json;
}

}  // namespace

nlohmann::ordered_json hf_config_of(const Config& config, const std::string& format) {
  const auto& m = config.model;
  auto refuse = [&](const std::string& key, const std::string& value, const std::string& why) {
    // --format hf and no --format reach here as hf-llama: name the export, not a format not given.
    const std::string exporter = format == "hf-gpt2" ? "--format hf-gpt2" : "the Hugging Face export";
    return InputError(exporter + " cannot represent model." + key + " = " + value + ": " + why);
  };
  if (m.mtp.depth > 0 && format == "hf-gpt2")
    throw refuse("mtp.depth", std::to_string(m.mtp.depth), "GPT-2 has no multi-token prediction modules");
  if (m.moe.enabled() && format == "hf-gpt2")
    throw refuse("moe.num_experts", std::to_string(m.moe.num_experts), "its MLPs are dense (no Mixture of Experts)");
  const int64_t heads = m.num_heads, layers = m.num_layers, hidden = m.hidden_size, vocab = m.vocab_size;
  if (format == "hf-gpt2") {
    if (m.norm != NormKind::layernorm) throw refuse("norm", to_string(m.norm), "GPT-2 has LayerNorm");
    if (m.activation != Activation::gelu) throw refuse("activation", to_string(m.activation), "GPT-2's MLP is GELU");
    if (m.position != PositionKind::learned)
      throw refuse("position", to_string(m.position), "GPT-2 has learned position embeddings");
    if (!m.bias || !m.qkv_bias) throw refuse("bias", "false", "GPT-2 has biases in every linear layer");
    if (!m.tie_embeddings) throw refuse("tie_embeddings", "false", "GPT-2's output layer is wte");
    if (m.kv_heads() != heads)
      throw refuse("num_kv_heads", std::to_string(m.kv_heads()), "GPT-2 has multi-head attention");
    return {{"architectures", {"GPT2LMHeadModel"}},
            {"model_type", "gpt2"},
            {"n_embd", hidden},
            {"n_layer", layers},
            {"n_head", heads},
            {"n_inner", config.ffn_size()},
            {"n_positions", m.seq_len},
            {"n_ctx", m.seq_len},
            {"vocab_size", vocab},
            {"layer_norm_epsilon", m.norm_eps},
            {"activation_function", "gelu_new"},
            {"resid_pdrop", 0.0},
            {"embd_pdrop", 0.0},
            {"attn_pdrop", 0.0},
            {"scale_attn_weights", true},
            {"tie_word_embeddings", true},
            {"use_cache", true},
            {"torch_dtype", "float32"}};
  }
  if (format != "hf-llama") throw InputError("--format '" + format + "' is not known; use hf-llama or hf-gpt2");
  if (m.norm != NormKind::rmsnorm) throw refuse("norm", to_string(m.norm), "Llama has RMSNorm");
  if (m.activation != Activation::swiglu) throw refuse("activation", to_string(m.activation), "Llama's MLP is SwiGLU");
  if (m.position != PositionKind::rope) throw refuse("position", to_string(m.position), "Llama has rotary embeddings");
  if (m.bias && !m.qkv_bias) {
    throw refuse("qkv_bias", "false",
                 "with model.bias true: Llama's attention_bias puts biases on q, k, v and o together");
  }
  if (m.mla.enabled()) return deepseek_v3_config_of(config, refuse);
  if (m.rope_interleave) {
    throw refuse("rope_interleave", "true",
                 "transformers' Llama family rotates rotate-half pairs (i, i + d/2); of the classes loom writes, only "
                 "DeepseekV3ForCausalLM interleaves");
  }
  if (m.mtp.depth > 0) {
    throw refuse("mtp.depth", std::to_string(m.mtp.depth),
                 "of the classes loom writes, only DeepseekV3ForCausalLM holds multi-token prediction modules");
  }
  if (m.qk_norm) return qwen3_config_of(config, refuse);
  if (m.moe.enabled()) return mixtral_config_of(config, refuse);
  // Biases on q, k and v alone are Qwen2's; Llama with attention_bias and mlp_bias has them everywhere.
  const bool qwen2 = m.qkv_bias && !m.bias;
  auto json = llama_family_json(config, qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM", qwen2 ? "qwen2" : "llama",
                                config.ffn_size());
  if (qwen2) {
    json["use_sliding_window"] = false;
    json["sliding_window"] = nullptr;
    json["max_window_layers"] = layers;
  } else {
    json["attention_bias"] = m.bias;
    json["mlp_bias"] = m.bias;
  }
  finish_llama_family_json(json, config);
  return json;
}

}  // namespace loom
