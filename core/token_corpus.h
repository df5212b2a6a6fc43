// A corpus is one long stream of tokens: the documents of a dataset concatenated
// in order. Samples are windows of it (see batch_sampler.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/indexed_dataset.h"

namespace loom {

class TokenCorpus {
 public:
  virtual ~TokenCorpus() = default;
  virtual int64_t num_tokens() const = 0;
  // Copies tokens [start, start + count) of the stream into OUT.
  virtual void read(int64_t start, int64_t count, int64_t* out) const = 0;
  // Where the tokens come from, for messages.
  virtual std::string describe() const = 0;
  // The first document start at or after TOKEN (or the end), where a split may cut without
  // cutting a document; TOKEN itself for a corpus without documents.
  virtual int64_t document_boundary(int64_t token) const { return token; }
};

// Tokens [start, start + count) of another corpus: one part of a data.split.
class SliceCorpus : public TokenCorpus {
 public:
  SliceCorpus(const TokenCorpus& base, int64_t start, int64_t count, std::string part)
      : base_(base), start_(start), count_(count), part_(std::move(part)) {}
  int64_t num_tokens() const override { return count_; }
  void read(int64_t start, int64_t count, int64_t* out) const override { base_.read(start_ + start, count, out); }
  std::string describe() const override;

 private:
  const TokenCorpus& base_;
  int64_t start_, count_;
  std::string part_;
};

// An indexed dataset on disk (PREFIX.bin + PREFIX.idx).
class IndexedCorpus : public TokenCorpus {
 public:
  // KEY: the config key that named it, for messages.
  explicit IndexedCorpus(const std::string& prefix, std::string key = "data.path");
  int64_t num_tokens() const override { return starts_.back(); }
  void read(int64_t start, int64_t count, int64_t* out) const override;
  std::string describe() const override { return key_ + " '" + prefix_ + "'"; }
  int64_t document_boundary(int64_t token) const override;

 private:
  std::string prefix_;
  std::string key_;
  IndexedDataset dataset_;
  std::vector<int64_t> starts_;  // token position where each sequence starts, then the total
};

// The built-in corpus used when data.path is empty: a deterministic token
// stream from a seeded second-order Markov source, so a model has structure to
// learn (the loss falls well below log(vocab)) without any download.
class SyntheticCorpus : public TokenCorpus {
 public:
  SyntheticCorpus(int64_t vocab_size, int64_t num_tokens, uint64_t seed);
  int64_t num_tokens() const override { return static_cast<int64_t>(tokens_.size()); }
  void read(int64_t start, int64_t count, int64_t* out) const override;
  std::string describe() const override { return "the built-in synthetic corpus"; }

 private:
  std::vector<int32_t> tokens_;
};

// The corpus a config asks for: data.path, or the synthetic one when it is empty.
std::unique_ptr<TokenCorpus> open_corpus(const std::string& path, int64_t vocab_size, uint64_t seed);

}  // namespace loom
