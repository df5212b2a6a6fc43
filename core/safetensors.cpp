#include "core/safetensors.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <tuple>
#include <utility>
#include <vector>

#include "core/errors.h"
#include "core/regular_file.h"

namespace loom {
namespace {

torch::ScalarType dtype_of(const std::string& name, const std::string& path, const std::string& tensor) {
  if (name == "F32") return torch::kFloat32;
  if (name == "F16") return torch::kFloat16;
  if (name == "BF16") return torch::kBFloat16;
  throw InputError("safetensors file '" + path + "': tensor '" + tensor + "' has dtype " + name +
                   "; loom reads F32, F16 and BF16");
}

}  // namespace

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header;
  if (!metadata.empty()) header["__metadata__"] = metadata;
  int64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    TORCH_CHECK(tensor.scalar_type() == torch::kFloat32, "safetensors writer: ", name, " is not float32");
    const int64_t bytes = tensor.numel() * 4;
    header[name] = {{"dtype", "F32"}, {"shape", tensor.sizes().vec()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  const std::string temporary = path + ".tmp";
  {
    errno = 0;  // a failed write's reason (core/errors.h): the first failure leaves it, later writes do nothing
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) throw_write_error("cannot write '" + temporary + "'");
    const uint64_t length = text.size();
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((length >> (8 * i)) & 0xff));
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const auto& [name, tensor] : tensors) {
      auto data = tensor.to(torch::kCPU).contiguous();
      out.write(static_cast<const char*>(data.data_ptr()), static_cast<std::streamsize>(data.numel() * 4));
    }
    if (!out.flush()) throw_write_error("cannot write '" + temporary + "'");
  }
  std::filesystem::rename(temporary, path);
}

SafetensorsReader::SafetensorsReader(std::string path)
    : path_(std::move(path)), in_(std::make_unique<std::ifstream>()) {
  auto& in = *in_;
  require_regular_file(path_, "safetensors file");  // before opening: a FIFO would wait for a writer
  in.open(path_, std::ios::binary);
  if (!in) throw InputError("cannot read safetensors file '" + path_ + "'");
  const auto file_size = static_cast<uint64_t>(std::filesystem::file_size(path_));
  unsigned char length_bytes[8];
  if (!in.read(reinterpret_cast<char*>(length_bytes), 8))
    throw InputError("'" + path_ + "' is not a safetensors file (too short)");
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | length_bytes[i];
  if (length > file_size - 8)
    throw InputError("'" + path_ + "' is not a safetensors file (header longer than the file)");
  std::string text(length, '\0');
  in.read(text.data(), static_cast<std::streamsize>(length));
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw InputError("'" + path_ + "' has an unreadable safetensors header: " + e.what());
  }
  const uint64_t data_start = 8 + length;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      if (info.is_object()) {
        for (const auto& [key, value] : info.items())
          if (value.is_string()) metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    try {
      Entry e;
      e.dtype = dtype_of(info.at("dtype").get<std::string>(), path_, name);
      e.shape = info.at("shape").get<std::vector<int64_t>>();
      // Offsets are sizes: a negative one, read as unsigned, would wrap round into the header.
      const auto& offsets = info.at("data_offsets");
      if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
          !offsets[1].is_number_unsigned()) {
        throw InputError("'" + path_ + "': tensor '" + name + "' has data_offsets " + offsets.dump() +
                         ", not two byte offsets");
      }
      const auto range = offsets.get<std::vector<uint64_t>>();
      uint64_t numel = 1;
      for (auto d : e.shape) {
        if (d < 0 || (d > 0 && numel > file_size / static_cast<uint64_t>(d))) {
          throw InputError("'" + path_ + "': tensor '" + name + "' has a shape larger than the file");
        }
        numel *= static_cast<uint64_t>(d);
      }
      e.bytes = numel * c10::elementSize(e.dtype);
      if (range[1] < range[0] || range[1] - range[0] != e.bytes || range[1] > file_size - data_start) {
        throw InputError("'" + path_ + "': tensor '" + name +
                         "' has a byte range that does not fit its shape or the file");
      }
      e.begin = data_start + range[0];
      entries_[name] = std::move(e);
    } catch (const nlohmann::json::exception& e) {
      throw InputError("'" + path_ + "': tensor '" + name + "' has a malformed header entry: " + e.what());
    }
  }
  // Each tensor its own bytes, and every byte of the data some tensor's, as the safetensors library
  // requires: two ranges that overlap would load one tensor's bytes as another's, and a gap or a
  // missing end means the header's length or offsets are off (the data read from the wrong place).
  std::vector<std::tuple<uint64_t, uint64_t, std::string>> ranges;
  for (const auto& [name, e] : entries_) ranges.emplace_back(e.begin, e.begin + e.bytes, name);
  std::sort(ranges.begin(), ranges.end());
  uint64_t end = data_start;
  std::string previous;
  for (const auto& [begin, stop, name] : ranges) {
    if (begin == stop) continue;  // an empty tensor holds no bytes, wherever its range sits
    if (begin < end) {
      throw InputError("'" + path_ + "': tensor '" + name + "' has a byte range that overlaps tensor '" + previous +
                       "''s (data_offsets must not overlap)");
    }
    if (begin > end) {
      throw InputError("'" + path_ + "': the data has bytes no tensor holds before tensor '" + name +
                       "' (data_offsets must cover the data without gaps)");
    }
    end = stop;
    previous = name;
  }
  if (end != file_size) {
    throw InputError("'" + path_ + "': its tensors hold " + std::to_string(end - data_start) +
                     " bytes of data, the file " + std::to_string(file_size - data_start) +
                     " (a header of the wrong length, or a damaged file)");
  }
}

std::vector<std::string> SafetensorsReader::names() const {
  std::vector<std::string> out;
  for (const auto& [name, entry] : entries_) out.push_back(name);
  return out;
}

const SafetensorsReader::Entry& SafetensorsReader::entry(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) throw InputError("'" + path_ + "' has no tensor '" + name + "'");
  return it->second;
}

const std::vector<int64_t>& SafetensorsReader::shape(const std::string& name) const {
  return entry(name).shape;
}

torch::Tensor SafetensorsReader::read(const std::string& name) const {
  const Entry& e = entry(name);
  auto tensor = torch::empty(e.shape, torch::TensorOptions().dtype(e.dtype));
  in_->clear();
  in_->seekg(static_cast<std::streamoff>(e.begin));
  in_->read(static_cast<char*>(tensor.data_ptr()), static_cast<std::streamsize>(e.bytes));
  if (!*in_) throw InputError("'" + path_ + "': cannot read tensor '" + name + "'");
  return tensor.to(torch::kFloat32);
}

std::map<std::string, torch::Tensor> read_safetensors(const std::string& path) {
  const SafetensorsReader reader(path);
  std::map<std::string, torch::Tensor> out;
  for (const auto& name : reader.names()) out[name] = reader.read(name);
  return out;
}

}  // namespace loom
