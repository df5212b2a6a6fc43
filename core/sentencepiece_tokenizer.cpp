#include "core/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>

#include "core/errors.h"

namespace loom {

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& path)
    : path_(path), processor_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  const auto status = processor_->Load(path);
  if (!status.ok()) {
    throw InputError("--tokenizer '" + path + "' is not a readable SentencePiece model: " + status.ToString());
  }
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

std::vector<int64_t> SentencePieceTokenizer::encode(const std::string& text) const {
  std::vector<int> ids;
  const auto status = processor_->Encode(text, &ids);
  // Encode fails only on a model that failed to load, which the constructor refuses.
  if (!status.ok()) throw std::runtime_error("SentencePiece encode failed: " + status.ToString());
  return {ids.begin(), ids.end()};
}

std::string SentencePieceTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::vector<int> narrow;
  narrow.reserve(ids.size());
  for (int64_t id : ids) {
    if (id >= 0 && id < vocab_size()) narrow.push_back(static_cast<int>(id));
  }
  std::string text;
  const auto status = processor_->Decode(narrow, &text);
  if (!status.ok()) throw std::runtime_error("SentencePiece decode failed: " + status.ToString());
  return text;
}

int64_t SentencePieceTokenizer::vocab_size() const {
  return processor_->GetPieceSize();
}
int64_t SentencePieceTokenizer::bos_id() const {
  return processor_->bos_id();
}
int64_t SentencePieceTokenizer::eos_id() const {
  return processor_->eos_id();
}

}  // namespace loom
