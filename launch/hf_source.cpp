#include "launch/hf_source.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "core/errors.h"
#include "core/hf_architecture.h"
#include "core/regular_file.h"

namespace loom::launch {
namespace {

namespace fs = std::filesystem;

// What transformers' generate takes its token ids from: generation_config.json where the directory
// has one, else config.json; null where SOURCE (an object) holds neither.
const nlohmann::json& generation_settings(const nlohmann::json& source) {
  static const nlohmann::json none;
  if (source.contains("generation_config")) return source.at("generation_config");
  return source.contains("config") ? source.at("config") : none;
}

nlohmann::json read_json(const fs::path& path) {
  require_regular_file(path.string(), "model.init_from:");
  std::ifstream in(path);
  const auto json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) throw InputError("model.init_from: '" + path.string() + "' is not a JSON object");
  return json;
}

// Settings of transformers' own training and inference that loom neither reads nor models (its
// dropout and balance loss are its config's): the source's go back out as they came in, where
// loom's defaults would turn a fine-tune in transformers after the export into another run.
bool transformers_setting(const std::string& key) {
  for (const char* setting : {"attention_dropout", "resid_pdrop", "embd_pdrop", "attn_pdrop", "use_cache",
                              "output_router_logits", "router_aux_loss_coef"})
    if (key == setting) return true;
  return false;
}

}  // namespace

nlohmann::json read_hf_source(const std::string& init_from) {
  std::error_code error;
  if (init_from.empty() || !fs::is_regular_file(fs::path(init_from) / "config.json", error)) return nullptr;
  nlohmann::json source = {{"config", read_json(fs::path(init_from) / "config.json")}};
  const auto generation = fs::path(init_from) / "generation_config.json";
  if (fs::is_regular_file(generation, error)) source["generation_config"] = read_json(generation);
  return source;
}

nlohmann::ordered_json exported_hf_config(const nlohmann::ordered_json& loom_config, const nlohmann::json& source,
                                          bool keep_architecture) {
  if (!source.is_object() || !source.contains("config")) return loom_config;
  const auto& given = source.at("config");
  const bool learned_positions = loom_config.value("model_type", "") == "gpt2";
  // loom's keys in loom's order (an export of an export is byte for byte the same), then the source's others.
  nlohmann::ordered_json out;
  for (const auto& [key, value] : loom_config.items()) {
    const bool kept = (keep_architecture && (key == "architectures" || key == "model_type")) ||
                      (key == "max_position_embeddings" && !learned_positions) ||
                      // The source's sliding window: loom trained within it (apply_hf_config), where
                      // full attention is the window's, and the model attends so beyond it.
                      key == "max_window_layers" || key == "sliding_window" || key == "use_sliding_window" ||
                      transformers_setting(key);
    // transformers 5 writes rope_theta and the scaling inside rope_parameters; two forms could disagree.
    if ((key == "rope_theta" || key == "rope_scaling") && given.contains("rope_parameters")) continue;
    if (key == "torch_dtype" && given.contains("dtype")) continue;  // transformers 5's name, below
    const bool given_here = given.contains(key) && !given.at(key).is_null();
    out[key] = kept && given_here ? nlohmann::ordered_json(given.at(key)) : value;
    // A source that named its class only through model_type gets that class written out.
    if (key == "architectures" && keep_architecture && !given_here) {
      if (const std::string architecture = hf_architecture(given); !architecture.empty()) out[key] = {architecture};
    }
  }
  for (const auto& [key, value] : given.items()) {
    if (!out.contains(key)) out[key] = value;
  }
  // A source that named its class only through architectures: the model_type of that class, so that
  // the export's two agree (transformers builds model_type's class; loom refuses a pair that differs).
  if (keep_architecture && !given.contains("model_type") && out.contains("architectures") &&
      out["architectures"].is_array() && out["architectures"].size() == 1 && out["architectures"][0].is_string()) {
    const std::string type = model_type_of_causal_lm(out["architectures"][0].get<std::string>());
    if (!type.empty()) out["model_type"] = type;
  }
  if (out.contains("dtype")) out["dtype"] = "float32";  // the weights written are float32
  return out;
}

nlohmann::ordered_json exported_generation_config(const nlohmann::ordered_json& config, const nlohmann::json& source) {
  if (source.is_object() && source.contains("generation_config")) return source.at("generation_config");
  nlohmann::ordered_json out = {{"_from_model_config", true}};
  for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id"}) {
    if (config.contains(key) && !config.at(key).is_null()) out[key] = config.at(key);
  }
  if (config.contains("transformers_version")) out["transformers_version"] = config.at("transformers_version");
  return out;
}

std::vector<int64_t> hf_stop_ids(const nlohmann::json& source, const std::string& where) {
  if (!source.is_object()) return {};
  const bool generation = source.contains("generation_config");
  const nlohmann::json& file = generation_settings(source);
  if (!file.is_object() || !file.contains("eos_token_id") || file.at("eos_token_id").is_null()) return {};
  const auto& eos = file.at("eos_token_id");
  std::vector<int64_t> ids;
  for (const auto& id : eos.is_array() ? eos : nlohmann::json::array({eos})) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0) {
      throw InputError(where + ": " + (generation ? "generation_config.json" : "config.json") +
                       "'s eos_token_id must be a token id or a list of them, not " + eos.dump());
    }
    ids.push_back(id.get<int64_t>());
  }
  return ids;
}

int64_t hf_bos_id(const nlohmann::json& source) {
  if (!source.is_object()) return -1;
  const nlohmann::json& file = generation_settings(source);
  if (!file.is_object() || !file.contains("bos_token_id") || !file.at("bos_token_id").is_number_integer()) return -1;
  return std::max<int64_t>(-1, file.at("bos_token_id").get<int64_t>());
}

}  // namespace loom::launch
