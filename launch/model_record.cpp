#include "launch/model_record.h"

#include <algorithm>

#include "core/errors.h"

namespace loom::launch {
namespace {

// Every key that depends on the architecture, with the value a GPT-2 has.
nlohmann::json gpt2_defaults() {
  const ModelConfig gpt2;
  return {{"arch", to_string(gpt2.arch)},
          {"norm", to_string(gpt2.norm)},
          {"norm_eps", gpt2.norm_eps},
          {"activation", to_string(gpt2.activation)},
          {"position", to_string(gpt2.position)},
          {"rope_theta", gpt2.rope_theta},
          {"rope_scaling", {{"type", to_string(RopeScalingKind::none)}}},
          {"bias", gpt2.bias},
          {"qkv_bias", gpt2.qkv_bias},
          {"tie_embeddings", gpt2.tie_embeddings}};
}

}  // namespace

nlohmann::json model_record(const Config& c) {
  const auto& m = c.model;
  nlohmann::json model = {{"num_layers", m.num_layers},      {"hidden_size", m.hidden_size}, {"num_heads", m.num_heads},
                          {"ffn_hidden_size", c.ffn_size()}, {"vocab_size", m.vocab_size},   {"seq_len", m.seq_len}};
  if (m.moe.enabled()) {  // dense checkpoints stay as they were
    model["moe_num_experts"] = m.moe.num_experts;
    model["moe_every"] = m.moe.every;
    // The expert shapes and which blocks have experts, where they differ from the defaults (so that
    // the records of earlier MoE checkpoints stay as they were).
    // The width the experts get (0 and ffn_hidden_size are one model), the dense blocks as a sorted set.
    if (c.moe_ffn_size() != c.ffn_size()) model["moe_intermediate_size"] = c.moe_ffn_size();
    if (m.moe.n_shared_experts > 0) model["moe_n_shared_experts"] = m.moe.n_shared_experts;
    if (m.moe.first_k_dense_replace > 0) model["moe_first_k_dense_replace"] = m.moe.first_k_dense_replace;
    if (m.moe.decoder_sparse_step > 1) model["moe_decoder_sparse_step"] = m.moe.decoder_sparse_step;
    // An expert bias asked for by itself (model.moe.expert_bias: DeepSeek-V3's); one implied by
    // bias_update_rate is the router record's (launch/model_record.h).
    if (m.moe.expert_bias) model["moe_expert_bias"] = true;
    if (!m.moe.mlp_only_layers.empty()) {
      std::vector<int64_t> dense = m.moe.mlp_only_layers;
      std::sort(dense.begin(), dense.end());
      dense.erase(std::unique(dense.begin(), dense.end()), dense.end());
      model["moe_mlp_only_layers"] = dense;
    }
  }
  if (m.kv_heads() != m.num_heads) model["num_kv_heads"] = m.kv_heads();
  // Qwen3's head width, when it is not hidden / heads (a head_dim equal to it is the same model).
  if (m.attention_head_dim > 0 && m.attention_head_dim * m.num_heads != m.hidden_size)
    model["head_dim"] = m.attention_head_dim;
  if (m.qk_norm) model["qk_norm"] = true;
  if (m.mla.enabled()) {
    const auto& a = m.mla;
    model["mla"] = {{"q_lora_rank", a.q_lora_rank},
                    {"kv_lora_rank", a.kv_lora_rank},
                    {"qk_nope_head_dim", a.qk_nope_head_dim},
                    {"qk_rope_head_dim", a.qk_rope_head_dim},
                    {"v_head_dim", a.v_head_dim}};
  }
  if (m.rope_interleave) model["rope_interleave"] = true;
  if (m.mtp.depth > 0) model["mtp_depth"] = m.mtp.depth;  // its modules are parameters the checkpoint holds
  nlohmann::json arch = {{"arch", to_string(m.arch)},
                         {"norm", to_string(m.norm)},
                         {"norm_eps", m.norm_eps},
                         {"activation", to_string(m.activation)},
                         {"position", to_string(m.position)},
                         {"bias", m.bias},
                         {"qkv_bias", m.qkv_bias},
                         {"tie_embeddings", m.tie_embeddings}};
  if (m.position == PositionKind::rope) {  // the rotary keys mean nothing to learned positions
    arch["rope_theta"] = m.rope_theta;
    arch["rope_scaling"] = {{"type", to_string(m.rope_scaling.type)}};
    if (m.rope_scaling.type == RopeScalingKind::llama3) {
      const auto& s = m.rope_scaling;
      arch["rope_scaling"].update({{"factor", s.factor},
                                   {"low_freq_factor", s.low_freq_factor},
                                   {"high_freq_factor", s.high_freq_factor},
                                   {"original_max_position_embeddings", s.original_max_position_embeddings}});
      // Only where latent attention reads it, and set: records written before llama3 read it have none.
      if (s.mscale_all_dim > 0 && m.mla.enabled()) arch["rope_scaling"]["mscale_all_dim"] = s.mscale_all_dim;
    }
    if (m.rope_scaling.type == RopeScalingKind::yarn) {
      const auto& s = m.rope_scaling;
      arch["rope_scaling"].update({{"factor", s.factor},
                                   {"original_max_position_embeddings", s.original_max_position_embeddings},
                                   {"beta_fast", s.beta_fast},
                                   {"beta_slow", s.beta_slow},
                                   {"mscale", s.mscale},
                                   {"mscale_all_dim", s.mscale_all_dim},
                                   {"attention_factor", s.attention_factor}});
    }
  }
  const auto defaults = gpt2_defaults();
  for (const auto& [key, value] : arch.items()) {
    if (value != defaults.at(key)) model[key] = value;
  }
  return model;
}

nlohmann::json complete_model_record(const nlohmann::json& record) {
  auto complete = gpt2_defaults();
  complete["num_kv_heads"] = record.value("num_heads", nlohmann::json());
  complete["moe_num_experts"] = 0;  // a dense model: no experts
  complete["moe_every"] = 1;
  // The keys recorded only away from their defaults: a difference names the default, not "none".
  complete["head_dim"] = 0;
  complete["qk_norm"] = false;
  complete["mla"] = nullptr;
  complete["rope_interleave"] = false;
  complete["mtp_depth"] = 0;
  complete["moe_expert_bias"] = false;
  complete["moe_n_shared_experts"] = 0;
  complete["moe_first_k_dense_replace"] = 0;
  complete["moe_decoder_sparse_step"] = 1;
  complete["moe_mlp_only_layers"] = nlohmann::json::array();
  complete.update(record);
  // Experts without a width of their own have the MLP's (recorded only when it differs).
  if (complete.value("moe_num_experts", 0) > 0 && !complete.contains("moe_intermediate_size"))
    complete["moe_intermediate_size"] = complete.value("ffn_hidden_size", nlohmann::json());
  return complete;
}

std::vector<std::string> model_record_differences(const nlohmann::json& saved, const nlohmann::json& asked) {
  // The keys a user sets, in the order that explains the rest: a key derived from another
  // (ffn_hidden_size from hidden_size, num_kv_heads from num_heads) comes after it.
  std::vector<std::string> keys = {
      "arch",       "num_layers", "hidden_size",     "num_heads", "num_kv_heads", "ffn_hidden_size",
      "vocab_size", "seq_len",    "moe_num_experts", "moe_every"};
  for (const auto& side : {saved, asked}) {
    for (const auto& [key, ignored] : side.items()) {  // a key on one side only shows up as "none" on the other
      if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
    }
  }
  const auto config_key = [](const std::string& key) {
    if (key == "moe_intermediate_size") return std::string("moe.moe_intermediate_size");
    if (key == "mtp_depth") return std::string("mtp.depth");
    if (key.rfind("moe_", 0) == 0) return "moe." + key.substr(4);  // moe_num_experts: moe.num_experts
    return key;
  };
  // A dense side has no expert settings to compare: the expert count's difference says it all
  // (its other moe_ keys would read "none" against the MoE side's values).
  const bool both_moe = saved.value("moe_num_experts", 0) > 0 && asked.value("moe_num_experts", 0) > 0;
  std::vector<std::string> differences;
  for (const auto& key : keys) {
    if (!both_moe && key != "moe_num_experts" && key.rfind("moe_", 0) == 0) continue;
    const auto saved_value = saved.value(key, nlohmann::json("none"));
    const auto asked_value = asked.value(key, nlohmann::json("none"));
    if (saved_value != asked_value) {
      differences.push_back("model." + config_key(key) + " = " + saved_value.dump() + ", the config " +
                            asked_value.dump());
    }
  }
  return differences;
}

nlohmann::json moe_router_record(const Config& c) {
  const auto& moe = c.model.moe;
  if (!moe.enabled()) return nullptr;
  return {{"top_k", moe.top_k},
          {"score", moe.score},
          {"norm_topk_prob", moe.norm_topk_prob},
          {"routed_scaling_factor", moe.routed_scaling_factor},
          {"n_group", moe.n_group},
          {"topk_group", moe.topk_group},
          {"capacity_factor", moe.capacity_factor},
          {"aux_loss_coeff", moe.aux_loss_coeff},
          {"z_loss_coeff", moe.z_loss_coeff},
          {"bias_update_rate", moe.bias_update_rate}};
}

void apply_moe_router_record(Config& c, const nlohmann::json& router, const std::string& source) {
  auto& moe = c.model.moe;
  try {
    moe.top_k = router.at("top_k").get<int64_t>();
    moe.score = router.at("score").get<std::string>();
    moe.norm_topk_prob = router.at("norm_topk_prob").get<bool>();
    moe.routed_scaling_factor = router.at("routed_scaling_factor").get<double>();
    moe.n_group = router.at("n_group").get<int64_t>();
    moe.topk_group = router.at("topk_group").get<int64_t>();
    moe.capacity_factor = router.at("capacity_factor").get<double>();
    moe.aux_loss_coeff = router.at("aux_loss_coeff").get<double>();
    moe.z_loss_coeff = router.at("z_loss_coeff").get<double>();
    moe.bias_update_rate = router.at("bias_update_rate").get<double>();
  } catch (const nlohmann::json::exception& e) {
    throw InputError(source + ": the manifest's moe_router " + router.dump() + " cannot be read: " + e.what());
  }
}

Config config_of_model_record(const nlohmann::json& record, const std::string& source) {
  Config c;
  auto& m = c.model;
  try {
    const auto r = complete_model_record(record);
    m.arch = from_string<ModelArch>(r.at("arch").get<std::string>());
    m.norm = from_string<NormKind>(r.at("norm").get<std::string>());
    m.norm_eps = r.at("norm_eps").get<double>();
    m.activation = from_string<Activation>(r.at("activation").get<std::string>());
    m.position = from_string<PositionKind>(r.at("position").get<std::string>());
    m.rope_theta = r.at("rope_theta").get<double>();
    const auto& scaling = r.at("rope_scaling");
    m.rope_scaling.type = from_string<RopeScalingKind>(scaling.at("type").get<std::string>());
    if (m.rope_scaling.type == RopeScalingKind::llama3) {
      m.rope_scaling.factor = scaling.at("factor").get<double>();
      m.rope_scaling.low_freq_factor = scaling.at("low_freq_factor").get<double>();
      m.rope_scaling.high_freq_factor = scaling.at("high_freq_factor").get<double>();
      m.rope_scaling.original_max_position_embeddings = scaling.at("original_max_position_embeddings").get<int64_t>();
      m.rope_scaling.mscale_all_dim = scaling.value("mscale_all_dim", 0.0);
    }
    if (m.rope_scaling.type == RopeScalingKind::yarn) {
      auto& s = m.rope_scaling;
      s.factor = scaling.at("factor").get<double>();
      s.original_max_position_embeddings = scaling.at("original_max_position_embeddings").get<int64_t>();
      s.beta_fast = scaling.at("beta_fast").get<double>();
      s.beta_slow = scaling.at("beta_slow").get<double>();
      s.mscale = scaling.at("mscale").get<double>();
      s.mscale_all_dim = scaling.at("mscale_all_dim").get<double>();
      s.attention_factor = scaling.at("attention_factor").get<double>();
    }
    if (!r.at("mla").is_null()) {
      const auto& a = r.at("mla");
      m.mla = {a.at("q_lora_rank").get<int64_t>(), a.at("kv_lora_rank").get<int64_t>(),
               a.at("qk_nope_head_dim").get<int64_t>(), a.at("qk_rope_head_dim").get<int64_t>(),
               a.at("v_head_dim").get<int64_t>()};
    }
    m.rope_interleave = r.at("rope_interleave").get<bool>();
    m.mtp.depth = r.at("mtp_depth").get<int64_t>();
    m.moe.expert_bias = r.at("moe_expert_bias").get<bool>();
    m.bias = r.at("bias").get<bool>();
    m.qkv_bias = r.at("qkv_bias").get<bool>();
    m.tie_embeddings = r.at("tie_embeddings").get<bool>();
    m.num_layers = r.at("num_layers").get<int64_t>();
    m.hidden_size = r.at("hidden_size").get<int64_t>();
    m.num_heads = r.at("num_heads").get<int64_t>();
    m.num_kv_heads = r.at("num_kv_heads").get<int64_t>();
    m.ffn_hidden_size = r.at("ffn_hidden_size").get<int64_t>();
    m.vocab_size = r.at("vocab_size").get<int64_t>();
    m.seq_len = r.at("seq_len").get<int64_t>();
    m.attention_head_dim = r.value("head_dim", int64_t{0});
    m.qk_norm = r.value("qk_norm", false);
    m.moe.num_experts = r.value("moe_num_experts", int64_t{0});
    m.moe.every = r.value("moe_every", int64_t{1});
    m.moe.moe_intermediate_size = r.value("moe_intermediate_size", int64_t{0});
    m.moe.n_shared_experts = r.value("moe_n_shared_experts", int64_t{0});
    m.moe.first_k_dense_replace = r.value("moe_first_k_dense_replace", int64_t{0});
    m.moe.decoder_sparse_step = r.value("moe_decoder_sparse_step", int64_t{1});
    m.moe.mlp_only_layers = r.value("moe_mlp_only_layers", std::vector<int64_t>{});
  } catch (const nlohmann::json::exception& e) {
    throw InputError(source + ": the manifest's model record " + record.dump() + " cannot be read: " + e.what());
  }
  // What the model's block rule divides by: a forged or damaged record must not reach it.
  if (m.moe.every < 1 || m.moe.decoder_sparse_step < 1 || m.num_heads < 1 || m.num_layers < 1) {
    throw InputError(source + ": the manifest's model record " + record.dump() +
                     " has a zero or negative num_heads, num_layers, moe_every or moe_decoder_sparse_step");
  }
  return c;
}

}  // namespace loom::launch
