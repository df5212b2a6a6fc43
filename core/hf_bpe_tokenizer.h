// A Hugging Face tokenizer.json with byte-level BPE (GPT-2, Llama 3, SmolLM): added
// tokens cut the text first, then the normalizer (none or NFC), the pre-tokenizer,
// GPT-2's byte alphabet and the merges; the ids equal the Rust library's
// (encode without special tokens).
//
// BOS and EOS: the bos_token/eos_token of a tokenizer_config.json beside the file when
// it names a known token; otherwise the first known of <|begin_of_text|>, <s>,
// <|startoftext|> (BOS) and <|end_of_text|>, <|endoftext|>, </s> (EOS); -1 if none.
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/tokenizer.h"

namespace loom {

class HfPreTokenizer;

class HfBpeTokenizer : public Tokenizer {
 public:
  // PATH is a tokenizer.json; unreadable or unsupported content is an InputError naming it and the key.
  explicit HfBpeTokenizer(const std::string& path);
  ~HfBpeTokenizer() override;
  std::vector<int64_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<int64_t>& ids) const override;
  int64_t vocab_size() const override { return vocab_size_; }
  int64_t bos_id() const override { return bos_id_; }
  bool adds_bos() const override { return adds_bos_; }
  int64_t eos_id() const override { return eos_id_; }
  std::string kind() const override { return "hf-bpe"; }
  std::string source() const override { return path_; }

 private:
  struct AddedToken {
    std::string content;
    int64_t id;
    bool lstrip, rstrip;
    bool single_word;  // matched only between non-word characters (not inside "tokens" or "xtoken")
  };
  // The added tokens matched in one pass, longest first.
  struct AddedTokenSet {
    std::vector<AddedToken> tokens;
    std::array<bool, 256> starts{};  // by byte: whether one of them starts with it
  };
  struct Merge {
    int64_t rank;
    int64_t merged;
  };
  // BPE of one pre-token (already in the byte alphabet), appended to IDS; cached per word.
  void encode_word(const std::string& word, std::vector<int64_t>& ids) const;
  // Cuts TEXT at the tokens of SET as Hugging Face's tokenizers do (leftmost-longest, without
  // overlaps): PLAIN gets each stretch between matches, in order, and each match's id joins IDS.
  static void split_at_added(const std::string& text, const AddedTokenSet& set, std::vector<int64_t>& ids,
                             const std::function<void(const std::string&)>& plain);
  // TEXT already normalized: pre-tokenized, then BPE.
  void encode_plain(const std::string& text, std::vector<int64_t>& ids) const;
  std::vector<int64_t> merge(const std::string& word) const;
  // CONFIG: tokenizer_config.json (an empty object when there is none).
  int64_t special_id(const nlohmann::json& config, const std::string& config_key,
                     const std::vector<std::string>& conventions) const;

  std::string path_;
  std::unordered_map<std::string, int64_t> vocab_;
  std::vector<std::string> tokens_;             // by id; "" for ids no token has
  std::vector<bool> is_added_;                  // by id: written as its text by decode
  std::unordered_map<uint64_t, Merge> merges_;  // key: left id << 32 | right id
  // Hugging Face's two passes: the tokens marked "normalized": false (the special ones) cut the raw
  // text first, the others each normalized piece after.
  AddedTokenSet raw_added_, normalized_added_;
  std::unique_ptr<HfPreTokenizer> pre_tokenizer_;
  bool nfc_ = false;
  bool ignore_merges_ = false;
  int64_t unk_id_ = -1;
  int64_t vocab_size_ = 0;
  int64_t bos_id_ = -1, eos_id_ = -1;
  bool adds_bos_ = false;
  // Words recur (" the", " of"): their BPE is computed once. Workers share it, hence the lock.
  mutable std::shared_mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int64_t>> cache_;
};

}  // namespace loom
