// Which transformers class a Hugging Face config.json describes.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace loom {

// The architecture a config.json names: its one "architectures" entry, else the causal-LM class
// transformers' AutoModelForCausalLM picks for its "model_type" (llama: LlamaForCausalLM), as a
// config saved without "architectures" (LlamaConfig(...).save_pretrained) loads there; "" when
// neither says.
std::string hf_architecture(const nlohmann::json& config);

}  // namespace loom
