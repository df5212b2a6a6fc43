// A SentencePiece model file (*.model: Llama 2, TinyLlama) through libsentencepiece,
// which lives in a plugin (libloom_sentencepiece.so, core/sentencepiece_plugin.cpp)
// loaded on first use: see there why it cannot be linked into loom.
#pragma once

#include <cstddef>
#include <string>

#include "core/tokenizer.h"

namespace loom {

class SentencePieceTokenizer : public Tokenizer {
 public:
  // An InputError naming PATH when it cannot be read or is not a SentencePiece model.
  explicit SentencePieceTokenizer(const std::string& path);
  ~SentencePieceTokenizer() override;
  SentencePieceTokenizer(const SentencePieceTokenizer&) = delete;
  SentencePieceTokenizer& operator=(const SentencePieceTokenizer&) = delete;
  // Encode never adds BOS or EOS: the caller decides (`loom prepare --add-bos`).
  std::vector<int64_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<int64_t>& ids) const override;
  int64_t vocab_size() const override { return vocab_size_; }
  int64_t bos_id() const override { return bos_id_; }
  int64_t eos_id() const override { return eos_id_; }
  bool adds_bos() const override { return adds_bos_; }
  std::string special_token_text(int64_t id) const override;
  // The piece of the unknown token ("<unk>"; "" when the model has none).
  const std::string& unk_piece() const { return unk_piece_; }
  std::string kind() const override { return "sentencepiece"; }
  std::string source() const override { return path_; }

 private:
  using Encode = bool (*)(const void*, const char*, size_t, int**, size_t*, char*, size_t);
  using Decode = bool (*)(const void*, const int*, size_t, char**, size_t*, char*, size_t);
  using Release = void (*)(void*);
  using Free = void (*)(void*);

  std::string path_;
  void* library_ = nullptr;
  // The processor is const-safe for Encode/Decode, so workers can share one tokenizer.
  void* processor_ = nullptr;
  Encode encode_ = nullptr;
  Decode decode_ = nullptr;
  Release release_ = nullptr;
  Free free_ = nullptr;
  int64_t vocab_size_ = 0, bos_id_ = -1, eos_id_ = -1;
  std::string bos_piece_, eos_piece_, unk_piece_;  // their pieces ("<s>", "</s>", "<unk>"), which decode leaves out
  bool adds_bos_ = false;
};

}  // namespace loom
