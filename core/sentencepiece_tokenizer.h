// A SentencePiece model file (*.model: Llama 2, TinyLlama) through libsentencepiece.
#pragma once

#include <memory>
#include <string>

#include "core/tokenizer.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace loom {

class SentencePieceTokenizer : public Tokenizer {
 public:
  // An InputError naming PATH when it cannot be read or is not a SentencePiece model.
  explicit SentencePieceTokenizer(const std::string& path);
  ~SentencePieceTokenizer() override;
  // Encode never adds BOS or EOS: the caller decides (`loom prepare --add-bos`).
  std::vector<int64_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<int64_t>& ids) const override;
  int64_t vocab_size() const override;
  int64_t bos_id() const override;
  int64_t eos_id() const override;
  std::string kind() const override { return "sentencepiece"; }
  std::string source() const override { return path_; }

 private:
  std::string path_;
  // The processor is const-safe for Encode/Decode, so workers can share one tokenizer.
  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
};

}  // namespace loom
