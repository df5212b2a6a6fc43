// config.json fixtures for the unit tests of core/hf_config: a shrunk Llama 3.2 config and the
// keys model_keys_of_hf_config gives for a JSON, or the message it refuses it with.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "core/errors.h"
#include "core/hf_config.h"

namespace loom::test {

// A Llama 3.2-shaped config.json, shrunk.
inline nlohmann::json llama_json() {
  return nlohmann::json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 96,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 128,
    "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "hidden_act": "silu",
    "attention_bias": false, "mlp_bias": false, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"}})");
}

inline std::map<std::string, std::string> keys_of(const nlohmann::json& json) {
  const auto keys = model_keys_of_hf_config(json, "DIR/config.json");
  return {keys.begin(), keys.end()};
}

// The InputError's message, or "no error".
inline std::string keys_error(const nlohmann::json& json) {
  try {
    model_keys_of_hf_config(json, "DIR/config.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace loom::test
