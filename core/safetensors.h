// The safetensors format (Hugging Face): an 8-byte little-endian header
// length, a JSON header naming each tensor's dtype, shape and byte range, then
// the raw little-endian data. Written and read here because Debian ships no
// C++ library for it, and the format is that small.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace loom {

// Writes TENSORS (float32, in this order) and METADATA to PATH via a temporary file and a rename.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// One safetensors file whose header is read and checked up front and whose
// tensors are read one at a time when asked for, so that a rank reads only
// the tensors it holds of a model bigger than its memory. Throws InputError
// naming the file (and the tensor) for anything malformed.
class SafetensorsReader {
 public:
  explicit SafetensorsReader(std::string path);

  const std::string& path() const { return path_; }
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return entries_.count(name) > 0; }
  const std::vector<int64_t>& shape(const std::string& name) const;
  // NAME as float32 (F32, F16 and BF16 are read).
  torch::Tensor read(const std::string& name) const;
  // The header's __metadata__ (string to string; empty when absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  struct Entry {
    torch::ScalarType dtype;
    std::vector<int64_t> shape;
    uint64_t begin = 0, bytes = 0;  // from the file's start
  };
  const Entry& entry(const std::string& name) const;

  std::string path_;
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
  std::unique_ptr<std::ifstream> in_;
};

// Every tensor of PATH as float32 (F32, F16 and BF16 are read). Throws
// InputError naming the file for anything malformed.
std::map<std::string, torch::Tensor> read_safetensors(const std::string& path);

}  // namespace loom
