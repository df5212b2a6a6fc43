// The safetensors format (Hugging Face): an 8-byte little-endian header
// length, a JSON header naming each tensor's dtype, shape and byte range, then
// the raw little-endian data. Written and read here because Debian ships no
// C++ library for it, and the format is that small.
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace loom {

// Writes TENSORS (float32, in this order) and METADATA to PATH via a temporary file and a rename.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Every tensor of PATH as float32 (F32, F16 and BF16 are read). Throws
// InputError naming the file for anything malformed.
std::map<std::string, torch::Tensor> read_safetensors(const std::string& path);

}  // namespace loom
