// The training (or validation) order over one dataset or a weighted blend of
// several, as a pure function of the global sample position, so that every
// rank agrees and a resume at any position continues the same order.
//
// Blend: position i goes to the dataset furthest behind its share, the one
// maximising weight_d * (i + 1) - drawn_d(i) (the lowest index on a tie), and
// takes the next position of that dataset's own order (sequential or shuffled
// per epoch, see batch_sampler.h). Every prefix of the order then holds each
// dataset within one sample of its weight. The choice depends on all earlier
// ones; the counts at the start of every block of positions are kept, so a
// position costs at most one block of replay and memory grows by a few bytes
// per block.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/batch_sampler.h"

namespace loom {

class BlendedSampler {
 public:
  // WEIGHTS sum to 1, one per sampler; one sampler of weight 1 is its own order.
  BlendedSampler(std::vector<std::unique_ptr<BatchSampler>> samplers, std::vector<double> weights);

  struct Location {
    int64_t dataset = 0;
    int64_t position = 0;  // in that dataset's own order
  };
  Location locate(int64_t position) const;
  // Positions [first, first + count) as one batch.
  Batch batch(int64_t first, int64_t count) const;
  // How many samples each dataset gave to positions [0, position).
  std::vector<int64_t> drawn_before(int64_t position) const;
  // The 1-based epoch each dataset is in once positions [0, position) are drawn (its last sample's epoch).
  std::vector<int64_t> epochs_at(int64_t position) const;

  size_t num_datasets() const { return samplers_.size(); }
  const BatchSampler& dataset(size_t d) const { return *samplers_[d]; }

  static constexpr int64_t kBlock = 4096;

 private:
  // The dataset each position of block B goes to, and the counts at its end.
  void fill_block(int64_t block) const;

  std::vector<std::unique_ptr<BatchSampler>> samplers_;
  std::vector<double> weights_;
  mutable std::vector<std::vector<int64_t>> block_start_counts_;  // [b][d]: drawn before block b
  mutable int64_t cached_block_ = -1;
  mutable std::vector<int32_t> cached_dataset_;   // per position of the cached block
  mutable std::vector<int64_t> cached_position_;  // in its dataset's order
};

}  // namespace loom
