#include "models/kv_cache.h"

namespace loom::models {

KVCache::KVCache(int64_t layers, int64_t capacity)
    : capacity_(capacity),
      lengths_(static_cast<size_t>(layers), 0),
      keys_(static_cast<size_t>(layers)),
      values_(static_cast<size_t>(layers)) {
  TORCH_CHECK(layers >= 1 && capacity >= 1, "KVCache: needs at least one layer and one position");
}

std::pair<torch::Tensor, torch::Tensor> KVCache::append(int64_t layer, const torch::Tensor& keys,
                                                        const torch::Tensor& values) {
  TORCH_CHECK(layer >= 0 && layer < layers(), "KVCache: layer ", layer, " of ", layers());
  TORCH_CHECK(keys.dim() == 4 && keys.sizes() == values.sizes(), "KVCache: keys and values must be [B, S, heads, d]");
  const auto i = static_cast<size_t>(layer);
  const int64_t first = lengths_[i], s = keys.size(1);
  TORCH_CHECK(first + s <= capacity_, "KVCache: positions up to ", first + s, " but the cache holds ", capacity_);
  if (!keys_[i].defined()) {
    // Preallocated whole: appending a position is a copy into place, never a regrown tensor.
    keys_[i] = torch::empty({keys.size(0), keys.size(2), capacity_, keys.size(3)}, keys.options());
    values_[i] = torch::empty_like(keys_[i]);
  }
  TORCH_CHECK(keys_[i].size(0) == keys.size(0) && keys_[i].size(1) == keys.size(2) && keys_[i].size(3) == keys.size(3),
              "KVCache: layer ", layer, " was given keys of another shape than before");
  keys_[i].narrow(2, first, s).copy_(keys.transpose(1, 2));
  values_[i].narrow(2, first, s).copy_(values.transpose(1, 2));
  lengths_[i] = first + s;
  return {keys_[i].narrow(2, 0, first + s), values_[i].narrow(2, 0, first + s)};
}

}  // namespace loom::models
