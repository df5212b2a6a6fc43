#include "core/hf_config.h"

#include <filesystem>
#include <fstream>
#include <vector>

#include "core/config_fields.h"
#include "core/errors.h"
#include "core/hf_architecture.h"
#include "core/hf_json.h"
#include "core/hf_rope_config.h"
#include "core/logging.h"
#include "core/regular_file.h"

namespace loom {
namespace {

using Keys = HfKeys;

const char* bool_text(bool value) {
  return value ? "true" : "false";
}

// transformers 5.x lists each layer's attention (Qwen2's layer_types): loom's is full everywhere.
// The window some layer attends within, as transformers reads config.json (each query sees the
// last W keys, itself included), or 0 when every layer attends fully. sliding_window left out is
// the class's default (4096 for Mistral and the Qwens, none for Mixtral); null is none. Qwen2 and
// Qwen3 slide from layer max_window_layers (28) on, Qwen3-MoE in every layer, unless a layer_types
// list says it layer by layer.
int64_t sliding_window_of(const HfJson& hf, const nlohmann::json& json, const std::string& architecture) {
  const auto window = [&](int64_t missing) -> int64_t {
    if (!json.contains("sliding_window")) return missing;
    return json["sliding_window"].is_null() ? 0 : std::stoll(hf.integer("sliding_window"));
  };
  if (hf.has("layer_types")) {
    if (!json["layer_types"].is_array())
      throw hf.refused("layer_types", "must be a list, not " + json["layer_types"].dump());
    bool slides = false;
    for (const auto& type : json["layer_types"]) {
      slides = slides || type == "sliding_attention";
      if (type != "full_attention" && type != "sliding_attention") {
        throw hf.refused("layer_types", "has " + type.dump() + ": loom reads full_attention and sliding_attention");
      }
    }
    if (slides && window(4096) == 0)
      throw hf.refused("layer_types", "has sliding_attention layers, but sliding_window is null");
    return slides ? window(4096) : 0;
  }
  if (architecture == "MistralForCausalLM") return window(4096);
  if (architecture == "MixtralForCausalLM") return window(0);
  const bool qwen =
      architecture == "Qwen2ForCausalLM" || architecture == "Qwen3ForCausalLM" || architecture == "Qwen3MoeForCausalLM";
  if (!qwen || !hf.boolean("use_sliding_window", false)) return 0;
  if (architecture == "Qwen3MoeForCausalLM") return window(4096);
  const bool some_layer = std::stoll(hf.count("max_window_layers", 28)) < std::stoll(hf.integer("num_hidden_layers"));
  return some_layer ? window(4096) : 0;
}

// The SwiGLU MLP's activation: transformers' ACT2FN maps "swish" to the same SiLU.
void require_silu(const HfJson& hf) {
  // A null is None to transformers, which has no activation of that name (its model does not build).
  if (hf.null("hidden_act")) throw hf.refused("hidden_act", "is null; loom's SwiGLU MLP is silu");
  const std::string act = hf.text("hidden_act", "silu");
  if (act != "silu" && act != "swish") throw hf.refused("hidden_act", "is '" + act + "'; loom's SwiGLU MLP is silu");
}

// The MoE keys of a softmax router whose top num_experts_per_tok weights are renormalised if
// NORM (Mixtral, Qwen3-MoE), over EXPERTS experts of WIDTH (0: the MLP's) in the blocks
// SPARSE_STEP and DENSE_LAYERS leave sparse. The auxiliary losses' coefficients are training
// settings, loom's own (model.moe.aux_loss_coeff, z_loss_coeff). A renormalised single choice
// weights its expert by 1, where loom keeps the router's score (its only gradient): refused.
// DEFAULT_TOP_K: the transformers class's num_experts_per_tok where config.json has none.
void add_softmax_moe(const HfJson& hf, Keys& keys, const std::string& model, const std::string& experts, bool norm,
                     const std::string& width, const std::string& sparse_step, const std::string& dense_layers,
                     int64_t default_top_k) {
  const std::string top_k = hf.integer("num_experts_per_tok", default_top_k);
  if (top_k == "1" && norm) {
    throw hf.refused("num_experts_per_tok", "is 1 with the weights renormalised: " + model +
                                                " then weights the expert by 1, where loom keeps the router's score "
                                                "(the router's only gradient)");
  }
  keys.insert(keys.end(), {{"model.moe.num_experts", experts},
                           {"model.moe.top_k", top_k},
                           {"model.moe.score", "softmax"},
                           {"model.moe.norm_topk_prob", bool_text(norm)},
                           {"model.moe.routed_scaling_factor", "1"},
                           {"model.moe.n_group", "1"},
                           {"model.moe.topk_group", "1"},
                           {"model.moe.every", "1"},
                           {"model.moe.moe_intermediate_size", width},
                           {"model.moe.n_shared_experts", "0"},
                           {"model.moe.first_k_dense_replace", "0"},
                           {"model.moe.decoder_sparse_step", sparse_step},
                           {"model.moe.mlp_only_layers", dense_layers}});
}

Keys llama_keys(const HfJson& hf, const nlohmann::json& json, const std::string& architecture) {
  sliding_window_of(hf, json, architecture);  // checked here; apply_hf_config holds model.seq_len to it
  const bool qwen3 = architecture == "Qwen3ForCausalLM" || architecture == "Qwen3MoeForCausalLM";
  // What a key left out of config.json means is its transformers class's default: 1e-6 and 10000
  // for every class loom reads but Mixtral's (1e-5 and 1e6).
  const bool mixtral = architecture == "MixtralForCausalLM";
  require_silu(hf);
  const auto heads = std::stoll(hf.integer("num_attention_heads")), hidden = std::stoll(hf.integer("hidden_size"));
  // head_dim may differ from hidden_size / num_attention_heads (Qwen3's 128 at hidden 2048 and 32
  // heads): model.head_dim then says so; 0 keeps loom's hidden_size / num_heads.
  // Left out, Qwen3's is 128 (Qwen3Config's default); the other classes' hidden_size / heads.
  std::string head_dim = "0";
  const bool head_dim_given = hf.has("head_dim") || (architecture == "Qwen3ForCausalLM" && !json.contains("head_dim"));
  if (head_dim_given) {
    const auto d = std::stoll(hf.integer("head_dim", 128));
    if (d * heads != hidden) head_dim = std::to_string(d);
  } else if (hidden % heads != 0) {
    throw hf.refused("num_attention_heads",
                     "does not divide hidden_size = " + std::to_string(hidden) + " and there is no head_dim");
  }
  // Left out, num_key_value_heads is the class's default (Mistral's and Mixtral's 8, Qwen2's and
  // Qwen3's 32, Qwen3-MoE's 4); null, or Llama's left out, num_attention_heads.
  std::string kv_heads = std::to_string(heads);
  if (hf.has("num_key_value_heads")) {
    kv_heads = hf.integer("num_key_value_heads");
  } else if (!json.contains("num_key_value_heads")) {
    for (const auto& [name, count] : {std::pair{"MistralForCausalLM", 8},
                                      {"MixtralForCausalLM", 8},
                                      {"Qwen2ForCausalLM", 32},
                                      {"Qwen3ForCausalLM", 32},
                                      {"Qwen3MoeForCausalLM", 4}})
      if (architecture == name) kv_heads = std::to_string(count);
  }
  // Qwen2 has biases on q, k and v only; Llama's attention_bias covers q, k, v and o, mlp_bias the MLP.
  bool bias = false, qkv_bias = true;
  if (architecture != "Qwen2ForCausalLM") {
    const bool attention_bias = hf.boolean("attention_bias", false), mlp_bias = hf.boolean("mlp_bias", false);
    if (attention_bias && !hf.has("mlp_bias")) {  // Qwen3, Mixtral, Qwen3-MoE: no mlp_bias to pair it with
      throw hf.refused("attention_bias",
                       "is true; loom's model.bias puts biases on the attention and the MLP "
                       "together, and this model's MLP has none");
    }
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
               {"model.num_kv_heads", kv_heads},
               {"model.ffn_hidden_size", hf.integer("intermediate_size")},
               {"model.vocab_size", hf.integer("vocab_size")},
               {"model.norm_eps", hf.number("rms_norm_eps", mixtral ? 1e-5 : 1e-6)},
               {"model.bias", bool_text(bias)},
               {"model.qkv_bias", bool_text(qkv_bias)},
               {"model.tie_embeddings", bool_text(hf.boolean("tie_word_embeddings", false))},
               {"model.head_dim", head_dim},
               {"model.qk_norm", bool_text(qwen3)},
               {"model.rope_interleave", "false"},  // rotate-half, as transformers' Llama family rotates
               {"model.mla.kv_lora_rank", "0"}};
  add_rope(hf, json, keys, mixtral ? 1e6 : 1e4);
  if (architecture == "Qwen3MoeForCausalLM") {
    // Experts of moe_intermediate_size in the blocks decoder_sparse_step and mlp_only_layers leave
    // sparse, the dense ones of intermediate_size. Released checkpoints name the count num_experts,
    // transformers 5 writes num_local_experts.
    std::string dense_layers;
    if (hf.has("mlp_only_layers")) {
      const auto& list = json["mlp_only_layers"];
      if (!list.is_array()) throw hf.refused("mlp_only_layers", "must be a list of layer indices, not " + list.dump());
      for (const auto& layer : list) {
        if (!layer.is_number_integer() || layer.get<int64_t>() < 0)
          throw hf.refused("mlp_only_layers", "must be a list of layer indices, not " + list.dump());
        dense_layers += (dense_layers.empty() ? "" : ",") + std::to_string(layer.get<int64_t>());
      }
    }
    add_softmax_moe(hf, keys, "Qwen3-MoE",
                    hf.has("num_experts") ? hf.integer("num_experts") : hf.integer("num_local_experts"),
                    hf.boolean("norm_topk_prob", false), hf.integer("moe_intermediate_size"),
                    hf.integer("decoder_sparse_step", 1), dense_layers, /*default_top_k=*/8);
  }
  if (architecture == "MixtralForCausalLM") {
    // Every block's MLP is num_local_experts SwiGLU experts of intermediate_size (the one width).
    add_softmax_moe(hf, keys, "Mixtral", hf.integer("num_local_experts"), true, "0", "1", "", /*default_top_k=*/2);
  }
  return keys;
}

// DeepSeek-V3: latent attention, a sigmoid router with group-limited choice, a fixed expert bias
// (e_score_correction_bias) and scaled weights, shared experts, the first blocks dense. Absent
// fields take DeepseekV3Config's defaults, as transformers would. The released checkpoint is FP8
// (quantization_config): refused, to be converted to BF16 first.
Keys deepseek_v3_keys(const HfJson& hf, const nlohmann::json& json) {
  if (hf.has("quantization_config")) {
    throw hf.refused("quantization_config",
                     "is " + json["quantization_config"].dump() +
                         ": loom reads BF16 or F32 weights; convert an FP8 checkpoint (weights in blocks scaled by "
                         "weight_scale_inv) to BF16 first");
  }
  require_silu(hf);
  if (hf.boolean("attention_bias", false))
    throw hf.refused("attention_bias", "is true; loom's latent attention has no biases (nor has DeepSeek-V3's)");
  if (hf.text("topk_method", "noaux_tc") != "noaux_tc")
    throw hf.refused("topk_method", "is '" + hf.text("topk_method", "") + "'; loom routes DeepSeek-V3 as noaux_tc");
  if (hf.text("scoring_func", "sigmoid") != "sigmoid")
    throw hf.refused("scoring_func", "is '" + hf.text("scoring_func", "") + "'; DeepSeek-V3's router is a sigmoid");
  if (hf.integer("moe_layer_freq", 1) != "1")
    throw hf.refused("moe_layer_freq", "is " + hf.integer("moe_layer_freq") + "; loom reads DeepSeek-V3 with 1");
  const std::string heads = hf.integer("num_attention_heads");
  if (hf.integer("num_key_value_heads", std::stoll(heads)) != heads)
    throw hf.refused("num_key_value_heads", "differs from num_attention_heads; latent attention has a key per head");
  const std::string top_k = hf.integer("num_experts_per_tok", 8);
  const bool norm = hf.boolean("norm_topk_prob", true);
  if (top_k == "1" && norm) {
    throw hf.refused("num_experts_per_tok",
                     "is 1 with the weights renormalised: DeepSeek-V3 then weights the "
                     "expert by 1, where loom keeps the router's score");
  }
  Keys keys = {{"model.arch", "llama"},
               {"model.norm", "rmsnorm"},
               {"model.activation", "swiglu"},
               {"model.position", "rope"},
               {"model.num_layers", hf.integer("num_hidden_layers")},
               {"model.hidden_size", hf.integer("hidden_size")},
               {"model.num_heads", heads},
               {"model.num_kv_heads", heads},
               {"model.ffn_hidden_size", hf.integer("intermediate_size")},
               {"model.vocab_size", hf.integer("vocab_size")},
               {"model.norm_eps", hf.number("rms_norm_eps", 1e-6)},
               {"model.bias", "false"},
               {"model.qkv_bias", "false"},
               {"model.tie_embeddings", bool_text(hf.boolean("tie_word_embeddings", false))},
               {"model.head_dim", "0"},
               {"model.qk_norm", "false"},
               {"model.rope_interleave", bool_text(hf.boolean("rope_interleave", true))},
               // null: queries straight from the hidden state (DeepSeek-V2-Lite); absent: DeepseekV3Config's 1536.
               {"model.mla.q_lora_rank",
                hf.has("q_lora_rank") ? hf.integer("q_lora_rank") : (json.contains("q_lora_rank") ? "0" : "1536")},
               {"model.mla.kv_lora_rank", hf.integer("kv_lora_rank", 512)},
               {"model.mla.qk_nope_head_dim", hf.integer("qk_nope_head_dim", 128)},
               {"model.mla.qk_rope_head_dim", hf.integer("qk_rope_head_dim", 64)},
               {"model.mla.v_head_dim", hf.integer("v_head_dim", 128)},
               {"model.moe.num_experts",
                hf.has("n_routed_experts") ? hf.integer("n_routed_experts") : hf.integer("num_local_experts", 256)},
               {"model.moe.top_k", top_k},
               {"model.moe.score", "sigmoid"},
               {"model.moe.norm_topk_prob", bool_text(norm)},
               {"model.moe.routed_scaling_factor", hf.number("routed_scaling_factor", 2.5)},
               {"model.moe.n_group", hf.integer("n_group", 8)},
               {"model.moe.topk_group", hf.integer("topk_group", 4)},
               {"model.moe.expert_bias", "true"},
               {"model.moe.every", "1"},
               {"model.moe.moe_intermediate_size", hf.integer("moe_intermediate_size", 2048)},
               {"model.moe.n_shared_experts", hf.count("n_shared_experts", 1)},
               {"model.moe.first_k_dense_replace", hf.count("first_k_dense_replace", 3)},
               {"model.moe.decoder_sparse_step", "1"},
               {"model.moe.mlp_only_layers", ""}};
  add_rope(hf, json, keys, 1e4);
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
  if (key == "model.head_dim" && c.model.num_heads > 0) return std::to_string(c.model.head_dim());
  return field.print(c);
}

const ConfigField& field_named(const std::string& name) {
  for (const auto& f : config_fields()) {
    if (f.name() == name) return f;
  }
  throw std::logic_error("no config field " + name);
}

// transformers' AutoModelForCausalLM builds the class of model_type and never reads architectures:
// where the two disagree, either choice would train a model other than the one somebody meant.
void refuse_disagreeing_model_type(const HfJson& hf, const nlohmann::json& json, const std::string& architecture) {
  if (!json.contains("model_type") || !json["model_type"].is_string()) return;
  const std::string typed = causal_lm_of_model_type(json["model_type"].get<std::string>());
  if (typed.empty() || typed == architecture) return;
  throw hf.refused("architectures", "is " + architecture + " but model_type " + json["model_type"].dump() + " is " +
                                        typed +
                                        ", which transformers' AutoModelForCausalLM builds; make the two agree");
}

}  // namespace

Keys model_keys_of_hf_config(const nlohmann::json& json, const std::string& file) {
  const HfJson hf(json, file);
  const std::string architecture = hf_architecture(json);
  if (architecture.empty() && hf.has("architectures"))
    throw hf.refused("architectures", "must list one architecture, not " + json["architectures"].dump());
  if (architecture.empty()) {
    throw hf.refused("architectures", "is missing, and model_type " +
                                          (json.contains("model_type") ? json["model_type"].dump() : "too") +
                                          (json.contains("model_type") ? " is not one loom reads" : "") +
                                          " (llama, mistral, qwen2, qwen3, mixtral, qwen3_moe, deepseek_v3, gpt2)");
  }
  if (architecture == "LlamaForCausalLM" || architecture == "MistralForCausalLM" ||
      architecture == "Qwen2ForCausalLM" || architecture == "MixtralForCausalLM" ||
      architecture == "Qwen3ForCausalLM" || architecture == "Qwen3MoeForCausalLM") {
    refuse_disagreeing_model_type(hf, json, architecture);
    return llama_keys(hf, json, architecture);
  }
  if (architecture == "GPT2LMHeadModel" || architecture == "DeepseekV3ForCausalLM") {
    refuse_disagreeing_model_type(hf, json, architecture);
    return architecture == "GPT2LMHeadModel" ? gpt2_keys(hf) : deepseek_v3_keys(hf, json);
  }
  throw hf.refused("architectures",
                   "is " + architecture +
                       "; loom reads LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, "
                       "MixtralForCausalLM, Qwen3MoeForCausalLM, DeepseekV3ForCausalLM and GPT2LMHeadModel");
}

int64_t hf_sliding_window(const nlohmann::json& json, const std::string& file) {
  return sliding_window_of(HfJson(json, file), json, hf_architecture(json));
}

void apply_hf_config(Config& config, const std::set<std::string>& overridden) {
  const std::string dir = config.model.init_from;
  if (dir.empty() || !std::filesystem::is_directory(dir)) return;
  const std::string file = (std::filesystem::path(dir) / "config.json").string();
  require_regular_file(file, "model.init_from: the Hugging Face config");
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
    // Every value is checked where it is read from config.json; one that still does not parse is
    // refused here rather than left at loom's default.
    if (!field.parse(candidate, text))
      throw InputError(file + ": gives " + key + " the value " + text + ", which it cannot take");
    if (config.set_keys.count(key) && effective(config, key, field) != effective(candidate, key, field)) {
      conflicts.push_back(key + " is " + effective(config, key, field) +
                          (overridden.count(key) ? " by --set" : " in " + config.source) + " but " + file + " says " +
                          effective(candidate, key, field));
      continue;
    }
    field.parse(config, text);
    config.set_keys.insert(key);
    config.hf_keys.insert(key);
  }
  config.hf_file = file;
  if (!conflicts.empty()) {
    std::string message;
    for (const auto& c : conflicts) message += (message.empty() ? "" : "; ") + c;
    throw InputError(message + (conflicts.size() > 1 ? " (" + std::to_string(conflicts.size()) + " keys)" : "") +
                     ". The model keys come from config.json: leave them out of the config (configs/finetune_hf.yaml "
                     "sets none) or give config.json's values");
  }
  // Mixtral's training-time jitter is not read: loom's model.moe.router_jitter multiplies only the
  // router's input, where transformers' Mixtral hands the jittered states to the experts too.
  if (const auto jitter = json.value("router_jitter_noise", nlohmann::json(0.0));
      jitter.is_number() && jitter.get<double>() > 0 && config.model.moe.router_jitter == 0) {
    warn0(
        "{}: router_jitter_noise = {} is not applied; loom trains without jitter unless "
        "model.moe.router_jitter is set (noise on the router's input only)",
        file, jitter.dump());
  }
  // loom's attention is full: the same as a sliding window's while every sequence fits in the window.
  if (const int64_t window = hf_sliding_window(json, file); window > 0 && config.model.seq_len > window) {
    throw InputError("model.seq_len is " + std::to_string(config.model.seq_len) +
                     (overridden.count("model.seq_len") ? " by --set" : " in " + config.source) + ", but " + file +
                     " has layers that attend within a sliding_window of " + std::to_string(window) +
                     " tokens, which loom's attention does not have; at a model.seq_len of at most " +
                     std::to_string(window) +
                     " every token sees its whole sequence either way, and loom trains it exactly");
  }
  // The positions a model holds: the file's value is checked before a config's model.seq_len is held against it.
  const HfJson positions_json(json, file);
  const char* positions_key = config.model.arch == ModelArch::gpt2 ? "n_positions" : "max_position_embeddings";
  if (positions_json.null(positions_key)) throw positions_json.refused(positions_key, "must be a positive integer");
  const int64_t positions = std::stoll(positions_json.integer(positions_key, 1024));
  if (config.model.arch == ModelArch::gpt2 && positions < config.model.seq_len) {
    throw InputError("model.seq_len is " + std::to_string(config.model.seq_len) +
                     (overridden.count("model.seq_len") ? " by --set" : " in " + config.source) + " but the GPT-2 in " +
                     file + " has position embeddings for n_positions = " + std::to_string(positions) + " tokens");
  }
}

}  // namespace loom
