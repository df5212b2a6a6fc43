#include "core/token_corpus.h"

#include <algorithm>
#include <random>

#include "core/errors.h"

namespace loom {

IndexedCorpus::IndexedCorpus(const std::string& prefix, std::string key)
    : prefix_(prefix), key_(std::move(key)), dataset_(prefix) {
  starts_.reserve(dataset_.num_sequences() + 1);
  starts_.push_back(0);
  for (int32_t length : dataset_.sequence_lengths()) starts_.push_back(starts_.back() + length);
}

void IndexedCorpus::read(int64_t start, int64_t count, int64_t* out) const {
  // The sequence holding START: the last one that starts at or before it.
  size_t seq = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), start) - starts_.begin()) - 1;
  while (count > 0) {
    const int64_t offset = start - starts_[seq];
    const int64_t n = std::min(count, starts_[seq + 1] - start);
    dataset_.read(seq, offset, n, out);
    out += n;
    start += n;
    count -= n;
    ++seq;
  }
}

int64_t IndexedCorpus::document_boundary(int64_t token) const {
  // Documents start at the sequences the document index names.
  for (int64_t seq : dataset_.document_index()) {
    if (starts_[static_cast<size_t>(seq)] >= token) return starts_[static_cast<size_t>(seq)];
  }
  return num_tokens();
}

std::string SliceCorpus::describe() const {
  return base_.describe() + " (its " + part_ + " part: tokens " + std::to_string(start_) + " to " +
         std::to_string(start_ + count_) + ")";
}

SyntheticCorpus::SyntheticCorpus(int64_t vocab_size, int64_t num_tokens, uint64_t seed) {
  // Each token is, with probability 7/8, a fixed function of the one before it,
  // otherwise uniform noise: a model that learns the function reaches about
  // 1.1 nats per token, far below log(V).
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ULL + 0x5EED);
  std::vector<int32_t> table(static_cast<size_t>(vocab_size));
  for (int64_t i = 0; i < vocab_size; ++i) table[i] = static_cast<int32_t>(rng() % vocab_size);
  tokens_.resize(static_cast<size_t>(num_tokens));
  int64_t b = 0;
  for (auto& token : tokens_) {
    const uint64_t r = rng();
    const int64_t next = (r & 7) != 0 ? table[b] : static_cast<int64_t>((r >> 3) % vocab_size);
    token = static_cast<int32_t>(next);
    b = next;
  }
}

void SyntheticCorpus::read(int64_t start, int64_t count, int64_t* out) const {
  std::copy(tokens_.begin() + start, tokens_.begin() + start + count, out);
}

std::unique_ptr<TokenCorpus> open_corpus(const std::string& path, int64_t vocab_size, uint64_t seed) {
  if (path.empty()) return std::make_unique<SyntheticCorpus>(vocab_size, int64_t{1} << 20, seed);
  return std::make_unique<IndexedCorpus>(path);
}

}  // namespace loom
