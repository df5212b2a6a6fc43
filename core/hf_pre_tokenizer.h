// The pre-tokenizer of a Hugging Face tokenizer.json: how text is cut into words
// before BPE. Supports ByteLevel (GPT-2's regex, add_prefix_space, use_regex), Split
// (a regex or a string, every behavior, invert), Digits, and a Sequence of them, which
// covers GPT-2, Llama 3 and SmolLM. Anything else is an InputError naming its type.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace loom {

class PreTokenizerStep {
 public:
  virtual ~PreTokenizerStep() = default;
  // Cuts each of PIECES further; empty pieces are dropped.
  virtual std::vector<std::string> apply(const std::vector<std::string>& pieces) const = 0;
};

class HfPreTokenizer {
 public:
  // CONFIG is the tokenizer.json's "pre_tokenizer" (null: the text is one word); WHERE names the file.
  HfPreTokenizer(const nlohmann::json& config, const std::string& where);
  ~HfPreTokenizer();
  std::vector<std::string> split(const std::string& text) const;
  // Whether the pipeline ends in ByteLevel, which makes the words byte-level.
  bool byte_level() const { return byte_level_; }

 private:
  std::vector<std::unique_ptr<PreTokenizerStep>> steps_;
  bool byte_level_ = false;
};

}  // namespace loom
