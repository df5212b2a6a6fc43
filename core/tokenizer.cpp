#include "core/tokenizer.h"

#include <filesystem>

#include "core/errors.h"
#include "core/hf_bpe_tokenizer.h"
#include "core/sentencepiece_tokenizer.h"

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

namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

const char* const kKinds =
    "byte, a SentencePiece model file (*.model), or a Hugging Face tokenizer.json (or the directory holding either)";

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec) {
  if (spec == "byte") return std::make_unique<ByteTokenizer>();
  namespace fs = std::filesystem;
  std::error_code error;
  if (fs::is_directory(spec, error)) {
    const fs::path json = fs::path(spec) / "tokenizer.json";
    if (fs::is_regular_file(json, error)) return std::make_unique<HfBpeTokenizer>(json.string());
    // A model directory with only SentencePiece's file (Llama 2's slow tokenizer; loom's own export
    // of one), read as loom generate and model.init_from read that directory.
    const fs::path model = fs::path(spec) / "tokenizer.model";
    if (fs::is_regular_file(model, error)) return std::make_unique<SentencePieceTokenizer>(model.string());
    throw InputError("--tokenizer '" + spec +
                     "' is a directory with neither tokenizer.json nor tokenizer.model; the tokenizers are: " + kKinds);
  }
  if (ends_with(spec, ".model") || ends_with(spec, ".json")) {
    if (!fs::is_regular_file(spec, error)) throw InputError("--tokenizer '" + spec + "': no such file");
    if (ends_with(spec, ".model")) return std::make_unique<SentencePieceTokenizer>(spec);
    return std::make_unique<HfBpeTokenizer>(spec);
  }
  throw InputError("--tokenizer '" + spec + "' is not known; the tokenizers are: " + kKinds);
}

}  // namespace loom
