// Tensors laid end to end in one flat buffer, padded to a multiple of a shard
// count and cut into that many equal contiguous ranges (Megatron-LM's
// distributed-optimizer layout). The one layout behind AdamW's flat buffers,
// the dp gradient buckets, ZeRO-1's shards and the ZeRO-2/3 units: each says
// which tensors go in, in which order, and over how many shards.
#pragma once

#include <torch/torch.h>

#include <utility>
#include <vector>

namespace loom::parallel {

class FlatLayout {
 public:
  FlatLayout() = default;
  // NUMELS: the tensors' sizes in the order they sit in the buffer.
  explicit FlatLayout(std::vector<int64_t> numels, int64_t shards = 1);
  static FlatLayout of(const std::vector<torch::Tensor>& tensors, int64_t shards = 1);

  size_t size() const { return numels_.size(); }
  int64_t offset(size_t j) const { return offsets_[j]; }
  int64_t numel(size_t j) const { return numels_[j]; }
  int64_t used() const { return used_; }      // elements the tensors fill
  int64_t padded() const { return padded_; }  // the buffer's length: used() rounded up to the shards
  int64_t shards() const { return shards_; }
  int64_t shard_size() const { return padded_ / shards_; }
  int64_t shard_begin(int64_t shard) const { return shard * shard_size(); }

  // Tensor J's place in BUFFER (of padded() elements), flat or shaped SIZES.
  torch::Tensor flat_view(const torch::Tensor& buffer, size_t j) const {
    return buffer.narrow(0, offsets_[j], numels_[j]);
  }
  torch::Tensor view(const torch::Tensor& buffer, size_t j, at::IntArrayRef sizes) const {
    return flat_view(buffer, j).view(sizes);
  }
  // The part of tensor J that falls in the shard starting at SHARD_BEGIN, as [begin, end)
  // in buffer coordinates; empty (begin >= end) when none does.
  std::pair<int64_t, int64_t> in_shard(size_t j, int64_t shard_begin) const;

 private:
  std::vector<int64_t> numels_, offsets_;
  int64_t used_ = 0, padded_ = 0, shards_ = 1;
};

// Whether each of TENSORS is the sole user of its whole storage (offset 0, nothing beside it, no
// two sharing one), so that it may move into another buffer: a view into someone else's buffer,
// or two parameters tied by one storage, keep that tie by staying where they are.
bool each_owns_its_storage(const std::vector<torch::Tensor>& tensors);

}  // namespace loom::parallel
