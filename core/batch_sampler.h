// Which tokens each rank trains on. Sample i is tokens [i*S, i*S + S] of the
// corpus (inputs are the first S, targets the last S). One global counter of
// consumed samples is the position in the data: global batch b is positions
// [b*G, (b+1)*G), split contiguously into data-parallel ranks and then into
// micro-batches, so the position survives any change of layout.
// With data.order = shuffled, position p of epoch e maps to sample
// perm_e[p mod n] for a permutation drawn from the seed and e.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "core/token_corpus.h"

namespace loom {

struct Batch {
  torch::Tensor tokens;   // [count, S] int64
  torch::Tensor targets;  // [count, S] int64
};

class BatchSampler {
 public:
  BatchSampler(const TokenCorpus& corpus, int64_t seq_len, int64_t vocab_size, bool shuffled, uint64_t seed);

  int64_t num_samples() const { return num_samples_; }
  // The sample at global position POSITION of the (endless, epoch after epoch) order.
  int64_t sample_at(int64_t position) const;
  // Positions [first, first + count) as one batch.
  Batch batch(int64_t first, int64_t count) const;
  // The seq_len + 1 tokens of the sample at POSITION into OUT; an id outside the vocabulary is an InputError.
  void read_window(int64_t position, int64_t* out) const;
  int64_t seq_len() const { return seq_len_; }
  const TokenCorpus& corpus() const { return corpus_; }

 private:
  const TokenCorpus& corpus_;
  int64_t seq_len_;
  int64_t vocab_size_;
  bool shuffled_;
  uint64_t seed_;
  int64_t num_samples_;
  mutable int64_t perm_epoch_ = -1;
  mutable std::vector<int64_t> perm_;
};

// The position of the first sample a micro-batch holds.
inline int64_t micro_batch_start(int64_t consumed, int64_t global_batch, int64_t dp, int64_t dp_rank,
                                 int64_t micro_batch, int64_t micro) {
  return consumed + dp_rank * (global_batch / dp) + micro * micro_batch;
}

// Windows [count, S + 1] -> inputs (the first S tokens) and targets (the last S).
Batch batch_of_windows(const torch::Tensor& windows);

}  // namespace loom
