// The weights of a Hugging Face model directory, as transformers' save_pretrained
// lays them out: DIR/model.safetensors, or shards DIR/model-0000K-of-0000N.safetensors
// with DIR/model.safetensors.index.json mapping each tensor to its shard
// ({"metadata": {"total_size": BYTES}, "weight_map": {NAME: FILE}}).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/safetensors.h"

namespace loom {

// Reads the headers of every file up front and each tensor when asked for.
// Throws InputError naming the directory, file and tensor for anything
// missing, misshapen or malformed.
class HfWeights {
 public:
  explicit HfWeights(const std::string& dir);

  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return file_of_.count(name) > 0; }
  // The path of the file holding NAME.
  const std::string& file_of(const std::string& name) const;
  // NAME's stored shape (from the header read up front).
  const std::vector<int64_t>& shape(const std::string& name) const;
  // NAME as float32; with SHAPE, refused unless the stored tensor has that shape.
  torch::Tensor read(const std::string& name) const;
  torch::Tensor read(const std::string& name, const std::vector<int64_t>& shape) const;

 private:
  std::string dir_;
  std::string layout_;  // "model.safetensors" or the index's name, for messages
  std::map<std::string, std::unique_ptr<SafetensorsReader>> files_;
  std::map<std::string, const SafetensorsReader*> file_of_;
};

// Writes TENSORS (float32) into the existing directory DIR as model.safetensors
// or, when they hold more than MAX_SHARD_BYTES, as shards of at most that many
// bytes (a bigger tensor gets a shard to itself) and the index, in the order
// given. Returns the files written, by name.
std::vector<std::string> write_hf_weights(const std::string& dir,
                                          const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                                          int64_t max_shard_bytes, const std::map<std::string, std::string>& metadata);

// A size as transformers' --max-shard-size writes it: 5GB (10^9), 500MB, 100KB,
// 2GiB (2^30), 64MiB, 10KiB, or plain bytes. Throws InputError naming WHAT.
int64_t parse_byte_size(const std::string& text, const std::string& what);

}  // namespace loom
