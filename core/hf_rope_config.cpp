#include "core/hf_rope_config.h"

namespace loom {
namespace {

// The pretraining length a scaled rotary embedding (llama3, yarn) starts from, as transformers'
// standardize_rope_params finds it: a top-level original_max_position_embeddings first (Phi-3 and
// others keep it there, and transformers lets it win over the one inside), then the scaling's own,
// then max_position_embeddings.
const nlohmann::json& original_positions(const nlohmann::json& json, const nlohmann::json& scaling) {
  static const nlohmann::json none;
  for (const auto* holder : {&json, &scaling}) {
    if (holder->contains("original_max_position_embeddings")) return (*holder)["original_max_position_embeddings"];
  }
  return json.contains("max_position_embeddings") ? json["max_position_embeddings"] : none;
}

// The key original_positions read, for errors.
std::string original_positions_key(const nlohmann::json& json, const std::string& where) {
  return json.contains("original_max_position_embeddings") ? "original_max_position_embeddings"
                                                           : where + ".original_max_position_embeddings";
}

// YaRN's fields (rope_type yarn) as transformers reads them: factor (absent: max_position_embeddings
// over the original length), beta_fast 32 and beta_slow 1 by default, mscale, mscale_all_dim and
// attention_factor absent as 0 (derived); truncate false (an unrounded ramp) is refused.
void add_yarn(const HfJson& hf, const nlohmann::json& json, const nlohmann::json& scaling, const std::string& where,
              HfKeys& keys) {
  const auto& original = original_positions(json, scaling);
  if (!original.is_number_integer() || original.get<int64_t>() < 1)
    throw hf.refused(original_positions_key(json, where), "must be a positive integer");
  keys.emplace_back("model.rope_scaling.type", "yarn");
  keys.emplace_back("model.rope_scaling.original_max_position_embeddings", std::to_string(original.get<int64_t>()));
  if (scaling.contains("factor") && !scaling["factor"].is_null()) {
    keys.emplace_back("model.rope_scaling.factor", hf.number(scaling, "factor", where + "."));
  } else {
    const auto& positions = json.value("max_position_embeddings", nlohmann::json());
    if (!positions.is_number_integer())
      throw hf.refused(where + ".factor", "is missing, and there is no max_position_embeddings to derive it from");
    keys.emplace_back("model.rope_scaling.factor", nlohmann::json(static_cast<double>(positions.get<int64_t>()) /
                                                                  static_cast<double>(original.get<int64_t>()))
                                                       .dump());
  }
  for (const auto& [key, fallback] :
       {std::pair{"beta_fast", 32.0}, std::pair{"beta_slow", 1.0}, std::pair{"mscale", 0.0},
        std::pair{"mscale_all_dim", 0.0}, std::pair{"attention_factor", 0.0}}) {
    const bool given = scaling.contains(key) && !scaling[key].is_null();
    keys.emplace_back(std::string("model.rope_scaling.") + key,
                      given ? hf.number(scaling, key, where + ".") : nlohmann::json(fallback).dump());
  }
  if (scaling.value("truncate", true) != true)
    throw hf.refused(where + ".truncate", "is false; loom's YaRN rounds its ramp's ends (truncate true)");
}

}  // namespace

// The rotary settings, in either of transformers' forms: 4.x's top-level rope_theta and
// rope_scaling, or 5.x's rope_parameters (rope_theta and the scaling's fields in one object,
// which 5.x writes instead). rope_type default or Llama 3's (llama3); anything else would
// change the positions silently, so it is refused, as is a file whose two forms disagree. A file
// with neither gets DEFAULT_THETA, its transformers class's default.
void add_rope(const HfJson& hf, const nlohmann::json& json, HfKeys& keys, double default_theta) {
  const bool v5 = hf.has("rope_parameters");
  // transformers 5 reads a non-empty rope_scaling in place of rope_parameters, dropping its
  // rope_theta too (the class default takes it): a file with both is refused, not read either way.
  if (v5 && hf.has("rope_scaling") && !(json["rope_scaling"].is_object() && json["rope_scaling"].empty()) &&
      json["rope_parameters"].is_object()) {
    throw hf.refused("rope_scaling",
                     "is given beside rope_parameters; transformers 5 would read rope_scaling alone and drop "
                     "rope_parameters (its rope_theta " +
                         json["rope_parameters"].value("rope_theta", nlohmann::json()).dump() +
                         " among them): put the scaling's fields into rope_parameters and remove rope_scaling");
  }
  const nlohmann::json* scaling = nullptr;
  std::string where = "rope_scaling";
  if (v5) {
    const auto& parameters = json["rope_parameters"];
    if (!parameters.is_object()) throw hf.refused("rope_parameters", "must be an object, not " + parameters.dump());
    // Without its own rope_theta, rope_parameters takes the top-level one (standardize_rope_params).
    const bool own_theta = parameters.contains("rope_theta") && !parameters["rope_theta"].is_null();
    const std::string theta = own_theta || !hf.has("rope_theta")
                                  ? hf.number(parameters, "rope_theta", "rope_parameters.")
                                  : hf.number(json, "rope_theta", "");
    if (own_theta && hf.has("rope_theta") && json["rope_theta"].is_number() &&
        json["rope_theta"].get<double>() != parameters["rope_theta"].get<double>()) {
      throw hf.refused("rope_theta", "is " + json["rope_theta"].dump() + " but rope_parameters.rope_theta is " + theta +
                                         ": the file contradicts itself");
    }
    keys.emplace_back("model.rope_theta", theta);
    scaling = &parameters;
    where = "rope_parameters";
  } else {
    if (hf.has("rope_scaling")) {
      scaling = &json["rope_scaling"];
      if (!scaling->is_object()) throw hf.refused("rope_scaling", "must be null or an object, not " + scaling->dump());
    }
    // transformers 5 takes rope_scaling for rope_parameters, and a rope_theta inside it first.
    if (scaling && scaling->contains("rope_theta")) {
      const std::string theta = hf.number(*scaling, "rope_theta", "rope_scaling.");
      if (hf.has("rope_theta") && json["rope_theta"].is_number() &&
          json["rope_theta"].get<double>() != (*scaling)["rope_theta"].get<double>()) {
        throw hf.refused("rope_theta", "is " + json["rope_theta"].dump() + " but rope_scaling.rope_theta is " + theta +
                                           ": the file contradicts itself");
      }
      keys.emplace_back("model.rope_theta", theta);
    } else {
      keys.emplace_back("model.rope_theta", hf.number("rope_theta", default_theta));
    }
  }
  const std::string type =
      scaling ? scaling->value("rope_type", scaling->value("type", std::string("default"))) : std::string("default");
  if (type == "default") {
    keys.emplace_back("model.rope_scaling.type", "none");
    return;
  }
  if (type == "yarn") {
    add_yarn(hf, json, *scaling, where, keys);
    return;
  }
  if (type != "llama3") {
    throw hf.refused(
        where + ".rope_type",
        "is '" + type + "'; loom's rotary embeddings know Llama 3's scaling (llama3), YaRN (yarn) or none");
  }
  keys.emplace_back("model.rope_scaling.type", "llama3");
  for (const char* key : {"factor", "low_freq_factor", "high_freq_factor"})
    keys.emplace_back(std::string("model.rope_scaling.") + key, hf.number(*scaling, key, where + "."));
  const auto& original = original_positions(json, *scaling);
  if (!original.is_number_integer()) throw hf.refused(original_positions_key(json, where), "must be an integer");
  keys.emplace_back("model.rope_scaling.original_max_position_embeddings", std::to_string(original.get<int64_t>()));
  // DeepSeek-V3's attention multiplies its softmax scale by (0.1 mscale_all_dim ln(factor) + 1)^2
  // under any scaling, llama3's too (yarn_apply_mscale); the Llama family never reads it.
  if (scaling->contains("mscale_all_dim") && !(*scaling)["mscale_all_dim"].is_null())
    keys.emplace_back("model.rope_scaling.mscale_all_dim", hf.number(*scaling, "mscale_all_dim", where + "."));
}

}  // namespace loom
