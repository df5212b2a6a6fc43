#include "core/hf_config.h"

#include <filesystem>
#include <fstream>
#include <vector>

#include "core/config_fields.h"
#include "core/errors.h"

namespace loom {
namespace {

using Keys = std::vector<std::pair<std::string, std::string>>;

// config.json's values, each refusal naming the file and the key.
class HfJson {
 public:
  HfJson(const nlohmann::json& json, const std::string& file) : json_(json), file_(file) {}

  bool has(const std::string& key) const { return json_.contains(key) && !json_[key].is_null(); }
  const nlohmann::json& at(const std::string& key) const {
    if (!has(key)) throw refused(key, "is missing");
    return json_[key];
  }
  std::string integer(const std::string& key) const {
    const auto& v = at(key);
    if (!v.is_number_integer() || v.get<int64_t>() < 1)
      throw refused(key, "must be a positive integer, not " + v.dump());
    return std::to_string(v.get<int64_t>());
  }
  std::string integer(const std::string& key, int64_t fallback) const {
    return has(key) ? integer(key) : std::to_string(fallback);
  }
  std::string number(const nlohmann::json& holder, const std::string& key, const std::string& where) const {
    if (!holder.contains(key) || !holder[key].is_number()) throw refused(where + key, "must be a number");
    return holder[key].dump();
  }
  std::string number(const std::string& key, double fallback) const {
    if (!has(key)) return nlohmann::json(fallback).dump();
    return number(json_, key, "");
  }
  bool boolean(const std::string& key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!json_[key].is_boolean()) throw refused(key, "must be true or false, not " + json_[key].dump());
    return json_[key].get<bool>();
  }
  std::string text(const std::string& key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!json_[key].is_string()) throw refused(key, "must be a string, not " + json_[key].dump());
    return json_[key].get<std::string>();
  }
  InputError refused(const std::string& key, const std::string& why) const {
    return InputError(file_ + ": \"" + key + "\" " + why);
  }

 private:
  const nlohmann::json& json_;
  const std::string& file_;
};

const char* bool_text(bool value) {
  return value ? "true" : "false";
}

// The rotary settings, in either of transformers' forms: 4.x's top-level rope_theta and
// rope_scaling, or 5.x's rope_parameters (rope_theta and the scaling's fields in one object,
// which 5.x writes instead). rope_type default or Llama 3's (llama3); anything else would
// change the positions silently, so it is refused, as is a file whose two forms disagree.
void add_rope(const HfJson& hf, const nlohmann::json& json, Keys& keys) {
  const bool v5 = hf.has("rope_parameters");
  const nlohmann::json* scaling = nullptr;
  std::string where = "rope_scaling";
  if (v5) {
    const auto& parameters = json["rope_parameters"];
    if (!parameters.is_object()) throw hf.refused("rope_parameters", "must be an object, not " + parameters.dump());
    const std::string theta = hf.number(parameters, "rope_theta", "rope_parameters.");
    if (hf.has("rope_theta") && json["rope_theta"].is_number() &&
        json["rope_theta"].get<double>() != parameters["rope_theta"].get<double>()) {
      throw hf.refused("rope_theta", "is " + json["rope_theta"].dump() + " but rope_parameters.rope_theta is " + theta +
                                         ": the file contradicts itself");
    }
    keys.emplace_back("model.rope_theta", theta);
    scaling = &parameters;
    where = "rope_parameters";
  } else {
    keys.emplace_back("model.rope_theta", hf.number("rope_theta", 10000.0));
    if (hf.has("rope_scaling")) {
      scaling = &json["rope_scaling"];
      if (!scaling->is_object()) throw hf.refused("rope_scaling", "must be null or an object, not " + scaling->dump());
    }
  }
  const std::string type =
      scaling ? scaling->value("rope_type", scaling->value("type", std::string("default"))) : std::string("default");
  if (type == "default") {
    keys.emplace_back("model.rope_scaling.type", "none");
    return;
  }
  if (type != "llama3") {
    throw hf.refused(where + ".rope_type",
                     "is '" + type + "'; loom's rotary embeddings know only Llama 3's scaling (llama3) or none");
  }
  keys.emplace_back("model.rope_scaling.type", "llama3");
  for (const char* key : {"factor", "low_freq_factor", "high_freq_factor"})
    keys.emplace_back(std::string("model.rope_scaling.") + key, hf.number(*scaling, key, where + "."));
  const auto& original = scaling->value("original_max_position_embeddings", nlohmann::json());
  if (!original.is_number_integer())
    throw hf.refused(where + ".original_max_position_embeddings", "must be an integer");
  keys.emplace_back("model.rope_scaling.original_max_position_embeddings", std::to_string(original.get<int64_t>()));
}

// transformers 5.x lists each layer's attention (Qwen2's layer_types): loom's is full everywhere.
void refuse_sliding_layers(const HfJson& hf, const nlohmann::json& json) {
  if (!hf.has("layer_types")) return;
  if (!json["layer_types"].is_array())
    throw hf.refused("layer_types", "must be a list, not " + json["layer_types"].dump());
  for (const auto& type : json["layer_types"]) {
    if (type != "full_attention") {
      throw hf.refused("layer_types", "has " + type.dump() + ": loom's attention is full_attention in every layer");
    }
  }
}

Keys llama_keys(const HfJson& hf, const nlohmann::json& json, const std::string& architecture) {
  if (architecture == "MistralForCausalLM" && !json.contains("sliding_window")) {
    throw hf.refused("sliding_window",
                     "is missing, and transformers then gives Mistral a 4096-token sliding window, "
                     "which loom's attention does not have; loom reads Mistral with null");
  }
  if (hf.has("sliding_window") && architecture == "MistralForCausalLM") {
    throw hf.refused("sliding_window", "is " + json["sliding_window"].dump() +
                                           ": loom's attention has no sliding window; loom reads Mistral with null");
  }
  if (architecture == "MixtralForCausalLM" && hf.has("sliding_window")) {
    throw hf.refused("sliding_window", "is " + json["sliding_window"].dump() +
                                           ": loom's attention has no sliding window; loom reads Mixtral with null");
  }
  if (architecture == "Qwen2ForCausalLM" && hf.boolean("use_sliding_window", false)) {
    throw hf.refused("use_sliding_window", "is true: loom's attention has no sliding window");
  }
  refuse_sliding_layers(hf, json);
  const std::string act = hf.text("hidden_act", "silu");
  if (act != "silu") throw hf.refused("hidden_act", "is '" + act + "'; loom's SwiGLU MLP is silu");
  const auto heads = std::stoll(hf.integer("num_attention_heads")), hidden = std::stoll(hf.integer("hidden_size"));
  if (hf.has("head_dim") && json["head_dim"] != nlohmann::json(hidden / heads)) {
    throw hf.refused("head_dim", "is " + json["head_dim"].dump() + ", not hidden_size / num_attention_heads = " +
                                     std::to_string(hidden / heads) + ", which loom's attention assumes");
  }
  // Qwen2 has biases on q, k and v only; Llama's attention_bias covers q, k, v and o, mlp_bias the MLP.
  bool bias = false, qkv_bias = true;
  if (architecture != "Qwen2ForCausalLM") {
    const bool attention_bias = hf.boolean("attention_bias", false), mlp_bias = hf.boolean("mlp_bias", false);
    if (attention_bias != mlp_bias) {
      throw hf.refused("mlp_bias", std::string("is ") + bool_text(mlp_bias) + " and attention_bias " +
                                       bool_text(attention_bias) +
                                       ": loom's model.bias puts biases on the attention output and the MLP together");
    }
    bias = qkv_bias = attention_bias;
  }
  Keys keys = {{"model.arch", "llama"},
               {"model.norm", "rmsnorm"},
               {"model.activation", "swiglu"},
               {"model.position", "rope"},
               {"model.num_layers", hf.integer("num_hidden_layers")},
               {"model.hidden_size", hf.integer("hidden_size")},
               {"model.num_heads", hf.integer("num_attention_heads")},
               {"model.num_kv_heads", hf.integer("num_key_value_heads", heads)},
               {"model.ffn_hidden_size", hf.integer("intermediate_size")},
               {"model.vocab_size", hf.integer("vocab_size")},
               {"model.norm_eps", hf.number("rms_norm_eps", 1e-6)},
               {"model.bias", bool_text(bias)},
               {"model.qkv_bias", bool_text(qkv_bias)},
               {"model.tie_embeddings", bool_text(hf.boolean("tie_word_embeddings", false))}};
  add_rope(hf, json, keys);
  if (architecture == "MixtralForCausalLM") {
    // Every block's MLP is num_local_experts SwiGLU experts of intermediate_size behind a softmax
    // router whose top num_experts_per_tok weights are renormalised. The auxiliary losses'
    // coefficients are training settings, loom's own (model.moe.aux_loss_coeff, z_loss_coeff).
    keys.insert(keys.end(), {{"model.moe.num_experts", hf.integer("num_local_experts")},
                             {"model.moe.top_k", hf.integer("num_experts_per_tok")},
                             {"model.moe.score", "softmax"},
                             {"model.moe.norm_topk_prob", "true"},
                             {"model.moe.routed_scaling_factor", "1"},
                             {"model.moe.n_group", "1"},
                             {"model.moe.topk_group", "1"},
                             {"model.moe.every", "1"},
                             {"model.moe.moe_intermediate_size", "0"},
                             {"model.moe.n_shared_experts", "0"},
                             {"model.moe.first_k_dense_replace", "0"},
                             {"model.moe.decoder_sparse_step", "1"},
                             {"model.moe.mlp_only_layers", ""}});
  }
  return keys;
}

Keys gpt2_keys(const HfJson& hf) {
  const std::string act = hf.text("activation_function", "gelu_new");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    throw hf.refused("activation_function", "is '" + act + "'; loom's GELU is the tanh approximation (gelu_new)");
  if (!hf.boolean("tie_word_embeddings", true))
    throw hf.refused("tie_word_embeddings", "is false; loom reads GPT-2 with the output layer tied to wte");
  if (!hf.boolean("scale_attn_weights", true) || hf.boolean("scale_attn_by_inverse_layer_idx", false))
    throw hf.refused("scale_attn_weights",
                     "or scale_attn_by_inverse_layer_idx change the attention's scale from "
                     "loom's 1 / sqrt(head dim)");
  const auto hidden = std::stoll(hf.integer("n_embd"));
  return {{"model.arch", "gpt2"},
          {"model.norm", "layernorm"},
          {"model.activation", "gelu"},
          {"model.position", "learned"},
          {"model.bias", "true"},
          {"model.qkv_bias", "true"},
          {"model.tie_embeddings", "true"},
          {"model.num_layers", hf.integer("n_layer")},
          {"model.hidden_size", hf.integer("n_embd")},
          {"model.num_heads", hf.integer("n_head")},
          {"model.num_kv_heads", hf.integer("n_head")},
          {"model.ffn_hidden_size", hf.integer("n_inner", 4 * hidden)},
          {"model.vocab_size", hf.integer("vocab_size")},
          {"model.norm_eps", hf.number("layer_norm_epsilon", 1e-5)}};
}

// Keys whose unset value means "derived": compared by what the model gets.
std::string effective(const Config& c, const std::string& key, const ConfigField& field) {
  if (key == "model.num_kv_heads") return std::to_string(c.model.kv_heads());
  if (key == "model.ffn_hidden_size") return std::to_string(c.ffn_size());
  return field.print(c);
}

const ConfigField& field_named(const std::string& name) {
  for (const auto& f : config_fields()) {
    if (f.name() == name) return f;
  }
  throw std::logic_error("no config field " + name);
}

// MixtralForCausalLM's config.json for CONFIG, a Llama-shaped MoE checked by the caller; REFUSE
// names what Mixtral cannot hold: its routing is softmax, top-k renormalised, unscaled, in every
// block, over experts of the MLP's width without biases, none shared.
template <typename Refuse>
nlohmann::ordered_json mixtral_config_of(const Config& config, const Refuse& refuse) {
  const auto& m = config.model;
  const auto& moe = m.moe;
  if (m.bias || m.qkv_bias) throw refuse("bias", "true", "Mixtral has no biases");
  if (moe.score != "softmax") throw refuse("moe.score", moe.score, "Mixtral's router is a softmax");
  if (!moe.norm_topk_prob || moe.routed_scaling_factor != 1.0)
    throw refuse("moe.norm_topk_prob", moe.norm_topk_prob ? "true (scaled)" : "false",
                 "Mixtral renormalises the chosen experts' weights, unscaled");
  if (moe.n_group > 1) throw refuse("moe.n_group", std::to_string(moe.n_group), "Mixtral has no group-limited routing");
  if (moe.bias_update_rate > 0)
    throw refuse("moe.bias_update_rate", nlohmann::json(moe.bias_update_rate).dump(), "Mixtral has no expert bias");
  if (moe.n_shared_experts > 0)
    throw refuse("moe.n_shared_experts", std::to_string(moe.n_shared_experts), "Mixtral has no shared experts");
  for (int64_t layer = 0; layer < m.num_layers; ++layer) {
    if (!moe_block(moe, layer))
      throw refuse("moe.every", std::to_string(moe.every),
                   "block " + std::to_string(layer) + " is dense, and every Mixtral block has experts");
  }
  if (config.moe_ffn_size() != config.ffn_size())
    throw refuse("moe.moe_intermediate_size", std::to_string(moe.moe_intermediate_size),
                 "Mixtral's experts have intermediate_size, the one MLP width");
  nlohmann::ordered_json json = {{"architectures", {"MixtralForCausalLM"}},
                                 {"model_type", "mixtral"},
                                 {"hidden_size", m.hidden_size},
                                 {"intermediate_size", config.moe_ffn_size()},
                                 {"num_hidden_layers", m.num_layers},
                                 {"num_attention_heads", m.num_heads},
                                 {"num_key_value_heads", m.kv_heads()},
                                 {"head_dim", m.head_dim()},
                                 {"vocab_size", m.vocab_size},
                                 {"max_position_embeddings", m.seq_len},
                                 {"rms_norm_eps", m.norm_eps},
                                 {"rope_theta", m.rope_theta},
                                 {"rope_scaling", nullptr},
                                 {"hidden_act", "silu"},
                                 {"num_local_experts", moe.num_experts},
                                 {"num_experts_per_tok", moe.top_k},
                                 {"router_aux_loss_coef", moe.aux_loss_coeff},
                                 {"output_router_logits", false},
                                 {"sliding_window", nullptr}};
  if (m.rope_scaling.type == RopeScalingKind::llama3) {
    const auto& s = m.rope_scaling;
    json["rope_scaling"] = {{"rope_type", "llama3"},
                            {"factor", s.factor},
                            {"low_freq_factor", s.low_freq_factor},
                            {"high_freq_factor", s.high_freq_factor},
                            {"original_max_position_embeddings", s.original_max_position_embeddings}};
  }
  json["attention_dropout"] = 0.0;
  json["tie_word_embeddings"] = m.tie_embeddings;
  json["use_cache"] = true;
  json["torch_dtype"] = "float32";
  return json;
}

}  // namespace

Keys model_keys_of_hf_config(const nlohmann::json& json, const std::string& file) {
  const HfJson hf(json, file);
  const auto& list = hf.at("architectures");
  if (!list.is_array() || list.size() != 1 || !list[0].is_string())
    throw hf.refused("architectures", "must list one architecture, not " + list.dump());
  const std::string architecture = list[0].get<std::string>();
  if (architecture == "LlamaForCausalLM" || architecture == "MistralForCausalLM" ||
      architecture == "Qwen2ForCausalLM" || architecture == "MixtralForCausalLM") {
    return llama_keys(hf, json, architecture);
  }
  if (architecture == "GPT2LMHeadModel") return gpt2_keys(hf);
  throw hf.refused("architectures",
                   "is " + architecture +
                       "; loom reads LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM and MixtralForCausalLM "
                       "(without sliding windows) and GPT2LMHeadModel");
}

void apply_hf_config(Config& config, const std::set<std::string>& overridden) {
  const std::string dir = config.model.init_from;
  if (dir.empty() || !std::filesystem::is_directory(dir)) return;
  const std::string file = (std::filesystem::path(dir) / "config.json").string();
  std::ifstream in(file);
  if (!in) throw InputError("model.init_from: Hugging Face model directory '" + dir + "' has no config.json");
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw InputError(file + " is not valid JSON: " + e.what());
  }
  // Every key the YAML or --set gives another value than config.json, named at once: a config
  // written for another model conflicts in many, and one refusal at a time would take as many runs.
  std::vector<std::string> conflicts;
  for (const auto& [key, text] : model_keys_of_hf_config(json, file)) {
    const auto& field = field_named(key);
    Config candidate = config;
    field.parse(candidate, text);
    if (config.set_keys.count(key) && effective(config, key, field) != effective(candidate, key, field)) {
      conflicts.push_back(key + " is " + effective(config, key, field) +
                          (overridden.count(key) ? " by --set" : " in " + config.source) + " but " + file + " says " +
                          effective(candidate, key, field));
      continue;
    }
    field.parse(config, text);
    config.set_keys.insert(key);
  }
  if (!conflicts.empty()) {
    std::string message;
    for (const auto& c : conflicts) message += (message.empty() ? "" : "; ") + c;
    throw InputError(message + (conflicts.size() > 1 ? " (" + std::to_string(conflicts.size()) + " keys)" : "") +
                     ". The model keys come from config.json: leave them out of the config (configs/finetune_hf.yaml "
                     "sets none) or give config.json's values");
  }
  if (config.model.arch == ModelArch::gpt2) {
    const auto positions = json.value("n_positions", nlohmann::json(1024));
    if (!positions.is_number_integer() || positions.get<int64_t>() < config.model.seq_len) {
      throw InputError("model.seq_len is " + std::to_string(config.model.seq_len) +
                       (overridden.count("model.seq_len") ? " by --set" : " in " + config.source) +
                       " but the GPT-2 in " + file + " has position embeddings for n_positions = " + positions.dump() +
                       " tokens");
    }
  }
}

nlohmann::ordered_json hf_config_of(const Config& config, const std::string& format) {
  const auto& m = config.model;
  auto refuse = [&](const std::string& key, const std::string& value, const std::string& why) {
    return InputError("--format " + format + " cannot represent model." + key + " = " + value + ": " + why);
  };
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
  if (m.moe.enabled()) return mixtral_config_of(config, refuse);
  // Biases on q, k and v alone are Qwen2's; Llama with attention_bias and mlp_bias has them everywhere.
  const bool qwen2 = m.qkv_bias && !m.bias;
  nlohmann::ordered_json json = {{"architectures", {qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM"}},
                                 {"model_type", qwen2 ? "qwen2" : "llama"},
                                 {"hidden_size", hidden},
                                 {"intermediate_size", config.ffn_size()},
                                 {"num_hidden_layers", layers},
                                 {"num_attention_heads", heads},
                                 {"num_key_value_heads", m.kv_heads()},
                                 {"head_dim", m.head_dim()},
                                 {"vocab_size", vocab},
                                 {"max_position_embeddings", m.seq_len},
                                 {"rms_norm_eps", m.norm_eps},
                                 {"rope_theta", m.rope_theta},
                                 {"rope_scaling", nullptr},
                                 {"hidden_act", "silu"}};
  if (m.rope_scaling.type == RopeScalingKind::llama3) {
    const auto& s = m.rope_scaling;
    json["rope_scaling"] = {{"rope_type", "llama3"},
                            {"factor", s.factor},
                            {"low_freq_factor", s.low_freq_factor},
                            {"high_freq_factor", s.high_freq_factor},
                            {"original_max_position_embeddings", s.original_max_position_embeddings}};
  }
  if (qwen2) {
    json["use_sliding_window"] = false;
    json["sliding_window"] = nullptr;
    json["max_window_layers"] = layers;
  } else {
    json["attention_bias"] = m.bias;
    json["mlp_bias"] = m.bias;
  }
  json["attention_dropout"] = 0.0;
  json["tie_word_embeddings"] = m.tie_embeddings;
  json["use_cache"] = true;
  json["torch_dtype"] = "float32";
  return json;
}

}  // namespace loom
