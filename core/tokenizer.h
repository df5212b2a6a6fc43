// Text to token ids and back. `loom prepare` and `loom generate` take a tokenizer
// spec: "byte" (each UTF-8 byte is its id, 256 is the end of a document), a
// SentencePiece model file (*.model) or a Hugging Face tokenizer.json (or the
// directory holding it).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace loom {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // The ids of TEXT, as the reference tokenizer gives them, without BOS or EOS.
  virtual std::vector<int64_t> encode(const std::string& text) const = 0;
  // The text of IDS; special tokens are written as their text.
  virtual std::string decode(const std::vector<int64_t>& ids) const = 0;
  // Ids are below this.
  virtual int64_t vocab_size() const = 0;
  // -1 when the tokenizer has none.
  virtual int64_t bos_id() const = 0;
  virtual int64_t eos_id() const = 0;
  // Whether a prompt is encoded after BOS, as the reference library encodes one: a Hugging Face
  // tokenizer says (GPT-2's has a BOS it never adds); SentencePiece models add theirs when a
  // tokenizer_config.json beside says add_bos_token true.
  virtual bool adds_bos() const { return bos_id() >= 0; }
  // The text of the special token ID (BOS, EOS) as the vocabulary writes it ("<s>", "<|endoftext|>"):
  // what transformers' tokenizer_config.json names it by.
  virtual std::string special_token_text(int64_t id) const { return decode({id}); }
  // "byte", "sentencepiece" or "hf-bpe".
  virtual std::string kind() const = 0;
  // Where it was loaded from ("byte" for the byte tokenizer), for sidecars and messages.
  virtual std::string source() const = 0;
};

// Each byte of the text is its id (0-255); 256 ends a document.
class ByteTokenizer : public Tokenizer {
 public:
  std::vector<int64_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<int64_t>& ids) const override;
  int64_t vocab_size() const override { return 257; }
  int64_t bos_id() const override { return -1; }
  int64_t eos_id() const override { return 256; }
  std::string kind() const override { return "byte"; }
  std::string source() const override { return "byte"; }
};

// The tokenizer SPEC names; an unknown or unreadable one is an InputError naming it.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec);

}  // namespace loom
