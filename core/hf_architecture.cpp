#include "core/hf_architecture.h"

#include <map>

namespace loom {

std::string hf_architecture(const nlohmann::json& config) {
  if (!config.is_object()) return "";
  if (config.contains("architectures") && !config["architectures"].is_null()) {
    const auto& list = config["architectures"];
    return list.is_array() && list.size() == 1 && list[0].is_string() ? list[0].get<std::string>() : "";
  }
  static const std::map<std::string, std::string> by_model_type = {
      {"llama", "LlamaForCausalLM"}, {"mistral", "MistralForCausalLM"},       {"qwen2", "Qwen2ForCausalLM"},
      {"qwen3", "Qwen3ForCausalLM"}, {"mixtral", "MixtralForCausalLM"},       {"qwen3_moe", "Qwen3MoeForCausalLM"},
      {"gpt2", "GPT2LMHeadModel"},   {"deepseek_v3", "DeepseekV3ForCausalLM"}};
  const auto type = config.contains("model_type") && config["model_type"].is_string()
                        ? by_model_type.find(config["model_type"].get<std::string>())
                        : by_model_type.end();
  return type == by_model_type.end() ? "" : type->second;
}

}  // namespace loom
