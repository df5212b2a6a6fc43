#include "core/tokenizer.h"

#include "core/errors.h"

namespace loom {

std::vector<int64_t> ByteTokenizer::encode(const std::string& text) const {
  std::vector<int64_t> ids;
  ids.reserve(text.size());
  for (char c : text) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

std::string ByteTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string text;
  text.reserve(ids.size());
  for (int64_t id : ids) {
    if (id >= 0 && id < 256) text.push_back(static_cast<char>(id));
  }
  return text;
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec) {
  if (spec == "byte") return std::make_unique<ByteTokenizer>();
  throw InputError("--tokenizer '" + spec + "' is not known; the tokenizers are: byte");
}

}  // namespace loom
