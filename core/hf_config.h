// Hugging Face's config.json and loom's model keys, both ways: model.init_from
// a model directory takes its architecture from there, and `loom export`
// writes one that transformers' from_pretrained reads.
#pragma once

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"

namespace loom {

// The model keys a config.json implies, as --set would write them ("model.num_heads", "9"):
// the Llama family (Llama, Mistral, Qwen2, Qwen3, Mixtral, Qwen3-MoE), DeepSeek-V3 and GPT-2. Throws InputError naming
// FILE and the key for anything loom cannot represent.
std::vector<std::pair<std::string, std::string>> model_keys_of_hf_config(const nlohmann::json& json,
                                                                         const std::string& file);

// When model.init_from is a directory: sets the model keys from its config.json. A key
// CONFIG set (Config::set_keys) to another value is refused naming both; model.seq_len
// stays CONFIG's (GPT-2's n_positions must cover it). OVERRIDDEN: the keys --set gave,
// for the message.
void apply_hf_config(Config& config, const std::set<std::string>& overridden = {});

// The sliding window some layer of the model JSON (FILE's) attends within, as transformers reads
// it, or 0 when every layer attends fully. loom's attention is full: apply_hf_config holds
// model.seq_len within the window, where the two are the same.
int64_t hf_sliding_window(const nlohmann::json& json, const std::string& file);

// The config.json of CONFIG's model as FORMAT: hf-llama (LlamaForCausalLM, or
// Qwen2ForCausalLM for biases on q, k, v only) or hf-gpt2 (GPT2LMHeadModel). Throws
// InputError naming the key that the format cannot represent.
nlohmann::ordered_json hf_config_of(const Config& config, const std::string& format);

}  // namespace loom
