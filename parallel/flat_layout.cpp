#include "parallel/flat_layout.h"

#include <algorithm>
#include <set>

namespace loom::parallel {

FlatLayout::FlatLayout(std::vector<int64_t> numels, int64_t shards) : numels_(std::move(numels)), shards_(shards) {
  TORCH_CHECK(shards_ >= 1, "FlatLayout: shards must be at least 1, got ", shards_);
  for (const int64_t n : numels_) {
    offsets_.push_back(used_);
    used_ += n;
  }
  padded_ = (used_ + shards_ - 1) / shards_ * shards_;
}

FlatLayout FlatLayout::of(const std::vector<torch::Tensor>& tensors, int64_t shards) {
  std::vector<int64_t> numels;
  for (const auto& t : tensors) numels.push_back(t.numel());
  return FlatLayout(std::move(numels), shards);
}

std::pair<int64_t, int64_t> FlatLayout::in_shard(size_t j, int64_t shard_begin) const {
  return {std::max(shard_begin, offsets_[j]), std::min(shard_begin + shard_size(), offsets_[j] + numels_[j])};
}

bool each_owns_its_storage(const std::vector<torch::Tensor>& tensors) {
  std::set<const void*> storages;
  for (const auto& t : tensors) {
    if (t.storage_offset() != 0 || static_cast<int64_t>(t.storage().nbytes()) != t.numel() * t.element_size() ||
        !storages.insert(t.storage().data()).second)
      return false;
  }
  return true;
}

}  // namespace loom::parallel
