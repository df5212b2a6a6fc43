// The keys and values a decoder has computed for the positions it has seen, per
// layer, so that generating a token runs the model over that one position only
// (incremental decoding): a new position's query attends to the cached keys and
// values of every earlier one, which do not change as the sequence grows.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace loom::models {

class KVCache {
 public:
  // LAYERS layers, each holding up to CAPACITY positions. The buffers are made on the first
  // append, in the keys' shape, dtype and device: the cache knows nothing of the model.
  KVCache(int64_t layers, int64_t capacity);

  // Positions cached so far: the absolute position of the next token a model is given.
  // Every layer appends the same positions, so layer 0's count is the model's.
  int64_t length() const { return lengths_.at(0); }
  int64_t length(int64_t layer) const { return lengths_.at(static_cast<size_t>(layer)); }
  int64_t capacity() const { return capacity_; }
  int64_t layers() const { return static_cast<int64_t>(lengths_.size()); }

  // Appends LAYER's keys and values of S new positions, [B, S, kv_heads, d], and returns
  // the layer's keys and values of every position so far, [B, kv_heads, length, d].
  // Refused (c10::Error) beyond the capacity.
  std::pair<torch::Tensor, torch::Tensor> append(int64_t layer, const torch::Tensor& keys, const torch::Tensor& values);

 private:
  int64_t capacity_;
  std::vector<int64_t> lengths_;
  std::vector<torch::Tensor> keys_, values_;  // [B, kv_heads, capacity, d] each, once allocated
};

}  // namespace loom::models
