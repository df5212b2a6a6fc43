#include "core/hf_architecture.h"

#include <map>

namespace loom {
namespace {

const std::map<std::string, std::string>& by_model_type() {
  static const std::map<std::string, std::string> classes = {
      {"llama", "LlamaForCausalLM"}, {"mistral", "MistralForCausalLM"},       {"qwen2", "Qwen2ForCausalLM"},
      {"qwen3", "Qwen3ForCausalLM"}, {"mixtral", "MixtralForCausalLM"},       {"qwen3_moe", "Qwen3MoeForCausalLM"},
      {"gpt2", "GPT2LMHeadModel"},   {"deepseek_v3", "DeepseekV3ForCausalLM"}};
  return classes;
}

}  // namespace

std::string causal_lm_of_model_type(const std::string& model_type) {
  const auto found = by_model_type().find(model_type);
  return found == by_model_type().end() ? "" : found->second;
}

std::string model_type_of_causal_lm(const std::string& architecture) {
  for (const auto& [type, name] : by_model_type())
    if (name == architecture) return type;
  return "";
}

std::string hf_architecture(const nlohmann::json& config) {
  if (!config.is_object()) return "";
  if (config.contains("architectures") && !config["architectures"].is_null()) {
    const auto& list = config["architectures"];
    return list.is_array() && list.size() == 1 && list[0].is_string() ? list[0].get<std::string>() : "";
  }
  return config.contains("model_type") && config["model_type"].is_string()
             ? causal_lm_of_model_type(config["model_type"].get<std::string>())
             : "";
}

}  // namespace loom
