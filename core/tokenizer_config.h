// tokenizer_config.json, which Hugging Face keeps beside a tokenizer's files: what transformers'
// tokenizer classes read besides the vocabulary. loom reads whether a prompt starts with BOS.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace loom {

// The JSON of a tokenizer's file (tokenizer.json, tokenizer_config.json); an InputError naming it
// when it cannot be read or is not JSON.
nlohmann::json read_tokenizer_file(const std::string& path);

// The tokenizer_config.json in the directory of TOKENIZER_FILE (a tokenizer.json or
// tokenizer.model), or an empty object when there is none. An InputError naming it when it is
// not valid JSON.
nlohmann::json tokenizer_config_beside(const std::string& tokenizer_file);

// tokenizer_config_beside's, with the special tokens (bos_token, eos_token, ...) of a
// special_tokens_map.json in the same directory put over its own, as transformers' from_pretrained
// reads the pair (seen in 5.17: the map's eos_token wins where both name one).
nlohmann::json special_tokens_beside(const std::string& tokenizer_file);

// CONFIG's add_bos_token when it says (true or false); nullopt when it does not.
std::optional<bool> add_bos_token(const nlohmann::json& config);

}  // namespace loom
