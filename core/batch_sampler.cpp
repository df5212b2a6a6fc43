#include "core/batch_sampler.h"

#include <random>

#include "core/errors.h"

namespace loom {

BatchSampler::BatchSampler(const TokenCorpus& corpus, int64_t seq_len, int64_t vocab_size, bool shuffled, uint64_t seed)
    : corpus_(corpus), seq_len_(seq_len), vocab_size_(vocab_size), shuffled_(shuffled), seed_(seed) {
  num_samples_ = (corpus.num_tokens() - 1) / seq_len;
  if (num_samples_ < 1) {
    throw InputError(corpus.describe() + " holds " + std::to_string(corpus.num_tokens()) +
                     " tokens, fewer than model.seq_len + 1 = " + std::to_string(seq_len + 1));
  }
}

int64_t BatchSampler::sample_at(int64_t position) const {
  const int64_t epoch = position / num_samples_;
  const int64_t offset = position % num_samples_;
  if (!shuffled_) return offset;
  if (epoch != perm_epoch_) {
    perm_.resize(static_cast<size_t>(num_samples_));
    for (int64_t i = 0; i < num_samples_; ++i) perm_[i] = i;
    // Fisher-Yates with mt19937_64, whose output the C++ standard fixes, so every
    // platform and every rank draws the same order.
    std::mt19937_64 rng(seed_ ^ (0xD1B54A32D192ED03ULL * static_cast<uint64_t>(epoch + 1)));
    for (int64_t i = num_samples_ - 1; i > 0; --i) {
      const int64_t j = static_cast<int64_t>(rng() % static_cast<uint64_t>(i + 1));
      std::swap(perm_[i], perm_[j]);
    }
    perm_epoch_ = epoch;
  }
  return perm_[offset];
}

void BatchSampler::read_window(int64_t position, int64_t* out) const {
  corpus_.read(sample_at(position) * seq_len_, seq_len_ + 1, out);
  for (int64_t i = 0; i <= seq_len_; ++i) {
    if (out[i] < 0 || out[i] >= vocab_size_) {
      throw InputError(corpus_.describe() + " holds token id " + std::to_string(out[i]) +
                       ", outside model.vocab_size = " + std::to_string(vocab_size_));
    }
  }
}

Batch BatchSampler::batch(int64_t first, int64_t count) const {
  auto windows = torch::empty({count, seq_len_ + 1}, torch::kInt64);
  int64_t* data = windows.data_ptr<int64_t>();
  for (int64_t i = 0; i < count; ++i) read_window(first + i, data + i * (seq_len_ + 1));
  return batch_of_windows(windows);
}

Batch batch_of_windows(const torch::Tensor& windows) {
  const int64_t seq_len = windows.size(1) - 1;
  return {windows.narrow(1, 0, seq_len).contiguous(), windows.narrow(1, 1, seq_len).contiguous()};
}

}  // namespace loom
