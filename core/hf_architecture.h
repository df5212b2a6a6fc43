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

// The causal-LM class AutoModelForCausalLM builds for MODEL_TYPE ("" for one loom does not read), and
// back: the model_type of such a class ("" likewise).
std::string causal_lm_of_model_type(const std::string& model_type);
std::string model_type_of_causal_lm(const std::string& architecture);

}  // namespace loom
