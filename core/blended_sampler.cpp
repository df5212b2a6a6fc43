#include "core/blended_sampler.h"

#include <torch/torch.h>

namespace loom {

BlendedSampler::BlendedSampler(std::vector<std::unique_ptr<BatchSampler>> samplers, std::vector<double> weights)
    : samplers_(std::move(samplers)), weights_(std::move(weights)) {
  TORCH_CHECK(!samplers_.empty() && samplers_.size() == weights_.size(), "BlendedSampler: one weight per dataset");
  for (const auto& s : samplers_) {
    TORCH_CHECK(s->seq_len() == samplers_.front()->seq_len(), "BlendedSampler: datasets of different seq_len");
  }
  block_start_counts_.push_back(std::vector<int64_t>(samplers_.size(), 0));
}

void BlendedSampler::fill_block(int64_t block) const {
  // Blocks are known in order: each starts from the counts the one before ended with.
  while (static_cast<int64_t>(block_start_counts_.size()) <= block) {
    const int64_t b = static_cast<int64_t>(block_start_counts_.size()) - 1;
    cached_block_ = -1;
    fill_block(b);
    std::vector<int64_t> counts = block_start_counts_[static_cast<size_t>(b)];
    for (int32_t d : cached_dataset_) ++counts[static_cast<size_t>(d)];
    block_start_counts_.push_back(std::move(counts));
  }
  if (cached_block_ == block) return;
  std::vector<int64_t> counts = block_start_counts_[static_cast<size_t>(block)];
  cached_dataset_.assign(kBlock, 0);
  cached_position_.assign(kBlock, 0);
  for (int64_t j = 0; j < kBlock; ++j) {
    const double next = static_cast<double>(block * kBlock + j + 1);
    size_t best = 0;
    double best_error = weights_[0] * next - static_cast<double>(counts[0]);
    for (size_t d = 1; d < weights_.size(); ++d) {
      const double error = weights_[d] * next - static_cast<double>(counts[d]);
      if (error > best_error) {
        best = d;
        best_error = error;
      }
    }
    cached_dataset_[static_cast<size_t>(j)] = static_cast<int32_t>(best);
    cached_position_[static_cast<size_t>(j)] = counts[best]++;
  }
  cached_block_ = block;
}

BlendedSampler::Location BlendedSampler::locate(int64_t position) const {
  if (samplers_.size() == 1) return {0, position};
  fill_block(position / kBlock);
  const auto j = static_cast<size_t>(position % kBlock);
  return {cached_dataset_[j], cached_position_[j]};
}

Batch BlendedSampler::batch(int64_t first, int64_t count) const {
  const int64_t seq_len = samplers_.front()->seq_len();
  auto windows = torch::empty({count, seq_len + 1}, torch::kInt64);
  int64_t* data = windows.data_ptr<int64_t>();
  for (int64_t i = 0; i < count; ++i) {
    const Location where = locate(first + i);
    samplers_[static_cast<size_t>(where.dataset)]->read_window(where.position, data + i * (seq_len + 1));
  }
  return batch_of_windows(windows);
}

std::vector<int64_t> BlendedSampler::drawn_before(int64_t position) const {
  if (samplers_.size() == 1) return {position};
  const int64_t block = position / kBlock;
  fill_block(block);
  std::vector<int64_t> counts = block_start_counts_[static_cast<size_t>(block)];
  for (int64_t j = 0; j < position % kBlock; ++j) ++counts[static_cast<size_t>(cached_dataset_[j])];
  return counts;
}

std::vector<int64_t> BlendedSampler::epochs_at(int64_t position) const {
  const auto drawn = drawn_before(position);
  std::vector<int64_t> epochs;
  for (size_t d = 0; d < drawn.size(); ++d) {
    const int64_t n = samplers_[d]->num_samples();
    epochs.push_back(drawn[d] == 0 ? 1 : (drawn[d] - 1) / n + 1);
  }
  return epochs;
}

}  // namespace loom
